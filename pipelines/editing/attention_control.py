"""InfEdit's unified attention control for the batched DDCM call ``[source, unconditional, target]``.

Prompt-to-Prompt (Hertz et al. 2022) and InfEdit (Xu et al. 2023) edit by steering the target
branch's attention with the source branch's, inside one UNet call:

- **cross-attention control** (first ``cross_replace_steps`` of the steps): the target's
  cross-attention probabilities of tokens aligned to source tokens are the source's.
  *Word swap* (``"replace"``: prompts of the same token length, token i <-> token i) or
  *refinement* (``"refine"``: tokens aligned by a global alignment of the two token sequences; new
  target words keep their own maps). ``"auto"`` picks word swap for equal lengths.
- **re-weighting** (``equalizer``): the target's probabilities of chosen words are scaled.
- **self-attention control** (first ``self_replace_steps``): the target's self-attention
  probabilities are the source's (InfEdit: every layer), so the layout stays.
- **mutual self-attention**: the decoder's self-attention of the unconditional and target entries
  reads the source entry's keys and values.
- **LocalBlend**: the cross-attention maps of chosen words (the grid nearest 1/4 of the latent side,
  16 x 16 for SD1.5 at 512 px; summed over steps so far) are max-pooled, upsampled to the latent,
  normalised and thresholded; outside that region the target's clean latent is the source's.

:class:`AttentionControl` holds the settings and the step; :func:`attention_control` installs one
:class:`UnifiedAttentionProcessor` per attention layer with ``set_attn_processor`` and restores the
previous processors afterwards. A previously installed processor that has a ``record(probs, heads)``
method (an attention observer such as the mask dry run's store) keeps receiving every layer's
(controlled) cross-attention probabilities ``(B * heads, Q, K)``.

    >>> ctl = AttentionControl(tokenizer, "a red cat", "a blue dog", n=1, num_steps=8, cross_replace_steps=0.7)
    >>> with attention_control(unet, ctl):
    ...     for i, t in enumerate(timesteps):
    ...         ctl.step = i
    ...         eps = unet(torch.cat([x_s, x_t, x_t]), t, encoder_hidden_states=emb).sample
"""
from __future__ import annotations

import contextlib
import difflib

import torch
import torch.nn.functional as F

CROSS_MODES = ("auto", "replace", "refine")


def _prompt_ids(tokenizer, prompt: str) -> list[int]:
    return tokenizer(prompt, padding="max_length", max_length=tokenizer.model_max_length,
                     truncation=True).input_ids


def _content_length(tokenizer, ids: list[int]) -> int:
    """Tokens up to and including the first end-of-text token (BOS, words, EOS)."""
    eos = tokenizer.eos_token_id
    return ids.index(eos) + 1 if eos in ids else len(ids)


def token_alignment(tokenizer, source_prompt: str, prompt: str, mode: str = "auto"):
    """Map each target token to a source token.

    Returns ``(mapper, alphas, mode)`` for one prompt pair: ``mapper`` (K,) long, the source position each target
    position reads its cross-attention map from; ``alphas`` (K,) float, 1 where the target token is
    aligned to a source token and 0 for new words (which keep their own maps); the mode used.
    ``"replace"`` (word swap) needs prompts of the same token length and maps position i to i;
    ``"refine"`` aligns the token sequences (longest matching blocks, :mod:`difflib`), and maps the
    padding after the target's end-of-text onto the source's padding in order.

        >>> mapper, alphas, mode = token_alignment(tok, "a cat", "a red cat")   # refine: "red" is new
    """
    if mode not in CROSS_MODES:
        raise ValueError(f"cross_attention_mode must be one of {CROSS_MODES}, got {mode!r}")
    src, tgt = _prompt_ids(tokenizer, source_prompt), _prompt_ids(tokenizer, prompt)
    k = len(tgt)
    ls, lt = _content_length(tokenizer, src), _content_length(tokenizer, tgt)
    if mode == "auto":
        mode = "replace" if ls == lt else "refine"
    if mode == "replace":
        if ls != lt:
            raise ValueError(f"word swap needs prompts of the same token length; {source_prompt!r} has {ls} "
                             f"tokens and {prompt!r} {lt}: use cross_attention_mode='refine'")
        return torch.arange(k), torch.ones(k), mode
    mapper, alphas = torch.zeros(k, dtype=torch.long), torch.zeros(k)
    matcher = difflib.SequenceMatcher(a=src[:ls], b=tgt[:lt], autojunk=False)
    for block in matcher.get_matching_blocks():
        for d in range(block.size):
            mapper[block.b + d], alphas[block.b + d] = block.a + d, 1.0
    unmatched = alphas[:lt] == 0  # new words: the mapper is unused there (alpha 0); point them at themselves
    mapper[:lt][unmatched] = torch.arange(lt)[unmatched].clamp_max(k - 1)
    mapper[lt:] = (ls + torch.arange(k - lt)).clamp_max(k - 1)
    alphas[lt:] = 1.0
    return mapper, alphas, mode


def word_tokens(tokenizer, prompt: str, word: str) -> list[int]:
    """Positions of ``word``'s tokens in ``prompt`` (every occurrence); [] when it is not there."""
    ids = _prompt_ids(tokenizer, prompt)
    w = tokenizer(word, add_special_tokens=False).input_ids
    if not w:
        return []
    found = []
    for i in range(1, len(ids) - len(w) + 1):
        if ids[i:i + len(w)] == w:
            found.extend(range(i, i + len(w)))
    return sorted(set(found))


class AttentionControl:
    """Settings and state of the unified attention control for one pipeline call.

    Args:
        tokenizer: the pipeline's tokenizer (to align tokens and find words).
        source_prompt, prompt: the source and target prompts, one string for the whole batch or a list
            of ``n`` (one pair per image).
        n: images per branch; the UNet batch is ``[source (n), unconditional (n), target (n)]``.
        num_steps: sampling steps of the call (fractions below are of these).
        cross_replace_steps: fraction of the first steps with cross-attention control (0 = off).
        self_replace_steps: fraction of the first steps in which the target's self-attention
            probabilities are the source's (0 = off).
        cross_attention_mode: ``"auto"``, ``"replace"`` (word swap) or ``"refine"``.
        equalizer: ``{word of prompt: scale}``; the target's cross-attention probabilities of those
            tokens are multiplied by the scale at every step (Prompt-to-Prompt re-weighting).
        local_blend_words: words of ``source_prompt`` and/or ``prompt`` whose cross-attention region
            the edit may change; outside it the target's clean latent is replaced by the source's.
        local_blend_threshold: threshold on the max-normalised maps (Prompt-to-Prompt: 0.3).
        local_blend_start: fraction of the first steps without blending (Prompt-to-Prompt: 0.2).
        mutual_self_attention: fraction of the first steps with mutual self-attention in the decoder.
    """

    def __init__(self, tokenizer, source_prompt, prompt, *, n: int, num_steps: int,
                 cross_replace_steps: float = 0.0, self_replace_steps: float = 0.0,
                 cross_attention_mode: str = "auto", equalizer: dict | None = None,
                 local_blend_words=None, local_blend_threshold: float = 0.3, local_blend_start: float = 0.2,
                 mutual_self_attention: float = 0.0):
        for name, v in (("cross_replace_steps", cross_replace_steps), ("self_replace_steps", self_replace_steps),
                        ("local_blend_threshold", local_blend_threshold), ("local_blend_start", local_blend_start),
                        ("mutual_self_attention", mutual_self_attention)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")
        self.n, self.num_steps, self.step = int(n), int(num_steps), 0
        sources = [source_prompt] * self.n if isinstance(source_prompt, str) else list(source_prompt)
        targets = [prompt] * self.n if isinstance(prompt, str) else list(prompt)
        if len(sources) != self.n or len(targets) != self.n:
            raise ValueError(f"need {self.n} source and target prompts, got {len(sources)} and {len(targets)}")
        self.cross_replace_steps, self.self_replace_steps = float(cross_replace_steps), float(self_replace_steps)
        self.mutual_self_attention = float(mutual_self_attention)
        if equalizer is not None and not isinstance(equalizer, dict):
            raise ValueError(f"equalizer must be a dict {{word: scale}}, got {type(equalizer).__name__}")
        words = [local_blend_words] if isinstance(local_blend_words, str) else list(local_blend_words or [])
        mappers, alphas, modes, eqs, blend_s, blend_t = [], [], [], [], [], []
        for src, tgt in zip(sources, targets):
            m, a, mode = token_alignment(tokenizer, src, tgt, cross_attention_mode)
            mappers.append(m)
            alphas.append(a)
            modes.append(mode)
            k = len(m)
            eq = torch.ones(k)
            for word, scale in (equalizer or {}).items():
                tokens = word_tokens(tokenizer, tgt, word)
                if not tokens:
                    raise ValueError(f"equalizer word {word!r} is not in the prompt {tgt!r}")
                eq[tokens] = float(scale)
            eqs.append(eq)
            ws, wt = torch.zeros(k), torch.zeros(k)
            for word in words:
                s, t = word_tokens(tokenizer, src, word), word_tokens(tokenizer, tgt, word)
                if not s and not t:
                    raise ValueError(f"local blend word {word!r} is in neither the source prompt {src!r} "
                                     f"nor the prompt {tgt!r}")
                ws[s], wt[t] = 1.0, 1.0
            blend_s.append(ws)
            blend_t.append(wt)
        self.mapper, self.alphas = torch.stack(mappers), torch.stack(alphas)  # (n, K)
        self.modes = modes
        self.equalizer = torch.stack(eqs) if equalizer else None  # (n, K)
        self.blend = bool(words)
        self.blend_source_tokens, self.blend_target_tokens = torch.stack(blend_s), torch.stack(blend_t)  # (n, K) 0/1
        self.blend_threshold, self.blend_start = float(local_blend_threshold), float(local_blend_start)
        self._maps: dict = {}  # query length -> (sum of source maps (n, Q, K), sum of target maps, count)

    # ---------------------------------------------------------------- per-step switches
    def _within(self, fraction: float) -> bool:
        return fraction > 0 and self.step < fraction * self.num_steps - 1e-9

    @property
    def cross_active(self) -> bool:
        return self._within(self.cross_replace_steps)

    @property
    def self_active(self) -> bool:
        return self._within(self.self_replace_steps)

    @property
    def mutual_active(self) -> bool:
        return self._within(self.mutual_self_attention)

    @property
    def active(self) -> bool:
        """Whether any processor has work (installing them is skipped otherwise)."""
        return bool(self.cross_replace_steps or self.self_replace_steps or self.mutual_self_attention
                    or self.equalizer is not None or self.blend)

    # ---------------------------------------------------------------- cross-attention
    def edit_cross(self, probs: torch.Tensor) -> torch.Tensor:
        """Controlled probabilities: ``probs`` (3n, heads, Q, K) of ``[source, unconditional, target]``."""
        n = self.n
        src, tgt = probs[:n], probs[2 * n:]
        if self.cross_active:
            mapper = self.mapper.to(probs.device)[:, None, None, :].expand_as(src)
            alphas = self.alphas.to(probs.device, probs.dtype)[:, None, None, :]
            tgt = src.gather(-1, mapper) * alphas + tgt * (1 - alphas)
        if self.equalizer is not None:
            tgt = tgt * self.equalizer.to(probs.device, probs.dtype)[:, None, None, :]
        if self.blend:
            q = probs.shape[2]
            s_sum, t_sum, count = self._maps.get(q, (0.0, 0.0, 0))
            self._maps[q] = (s_sum + src.float().sum(1), t_sum + tgt.float().sum(1), count + probs.shape[1])
        return torch.cat([probs[:2 * n], tgt])

    # ---------------------------------------------------------------- LocalBlend
    def blend_mask(self, latent_shape) -> torch.Tensor | None:
        """(n, 1, h, w) float mask, 1 where the target may differ from the source; None before blending."""
        if not self.blend or not self._maps or self.step < self.blend_start * self.num_steps - 1e-9:
            return None
        h, w = latent_shape[-2:]
        target_q = max(1, (h // 4) * (w // 4))
        q = min(self._maps, key=lambda m: abs(m - target_q))
        s_sum, t_sum, count = self._maps[q]
        rh = max(1, round((q * h / w) ** 0.5))
        rw = q // rh
        if rh * rw != q:
            raise ValueError(f"cannot lay {q} attention tokens on the latent grid {h} x {w}")
        mask = torch.zeros(self.n, 1, h, w, dtype=torch.bool, device=s_sum.device)
        for maps, weights in ((s_sum, self.blend_source_tokens), (t_sum, self.blend_target_tokens)):
            weights = weights.to(maps.device)
            m = (maps * weights[:, None, :]).sum(-1).div(count).view(-1, 1, rh, rw)
            m = F.max_pool2d(m, 3, 1, padding=1)
            m = F.interpolate(m, size=(h, w), mode="nearest")
            m = m / m.flatten(1).amax(1).clamp_min(1e-12).view(-1, 1, 1, 1)
            has = weights.sum(-1).gt(0).view(-1, 1, 1, 1)  # entries whose prompt holds a blend word
            mask |= (m > self.blend_threshold) & has
        return mask.float()

    def apply_blend(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``target`` where the blend mask is 1, ``source`` elsewhere (both (n, C, h, w))."""
        mask = self.blend_mask(target.shape)
        if mask is None:
            return target
        return source + mask.to(target.device, target.dtype) * (target - source)



def attention_input(attn, hidden_states, temb=None):
    """The start every diffusers attention processor shares: (residual, (B, N, C) tokens after the spatial
    norm, the input's (B, C, H, W) shape or None for token input)."""
    residual = hidden_states
    if attn.spatial_norm is not None:
        hidden_states = attn.spatial_norm(hidden_states, temb)
    shape = None
    if hidden_states.ndim == 4:
        shape = hidden_states.shape
        hidden_states = hidden_states.view(shape[0], shape[1], shape[2] * shape[3]).transpose(1, 2)
    return residual, hidden_states, shape


def attention_output(attn, out, residual, shape):
    """The matching end: output projection, back to (B, C, H, W) when the input was, residual, rescale."""
    out = attn.to_out[1](attn.to_out[0](out))
    if shape is not None:
        out = out.transpose(-1, -2).reshape(shape)
    if attn.residual_connection:
        out = out + residual
    return out / attn.rescale_output_factor


class UnifiedAttentionProcessor:
    """Attention processor of one layer (``name`` as in ``unet.attn_processors``) under an
    :class:`AttentionControl`. Cross-attention is computed explicitly (its probabilities are
    edited); self-attention runs through ``scaled_dot_product_attention`` with the source's query
    and key for the target when self-attention control is on (softmax(q_s k_s^T) v_t), and with
    the source's key and value for the unconditional and target entries under mutual self-attention
    (decoder layers only). A batch that is not ``3 n`` long passes through uncontrolled."""

    def __init__(self, control: AttentionControl, name: str, observer=None):
        self.control, self.name = control, name
        self.decoder = name.startswith("up_blocks")
        self.observer = observer if callable(getattr(observer, "record", None)) else None

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None,
                 *args, **kwargs):
        residual, hidden_states, shape = attention_input(attn, hidden_states, temb)
        cross = encoder_hidden_states is not None
        batch, seq, _ = encoder_hidden_states.shape if cross else hidden_states.shape
        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        context = hidden_states
        if cross:
            context = attn.norm_encoder_hidden_states(encoder_hidden_states) if attn.norm_cross \
                else encoder_hidden_states
        query, key, value = attn.to_q(hidden_states), attn.to_k(context), attn.to_v(context)
        ctl, heads = self.control, attn.heads
        controlled = query.shape[0] == 3 * ctl.n
        if cross:
            mask = attn.prepare_attention_mask(attention_mask, seq, batch)
            q, k, v = attn.head_to_batch_dim(query), attn.head_to_batch_dim(key), attn.head_to_batch_dim(value)
            probs = attn.get_attention_scores(q, k, mask)  # (B * heads, Q, K)
            if controlled:
                probs = ctl.edit_cross(probs.view(batch, heads, *probs.shape[1:])).reshape(probs.shape)
            if self.observer is not None:
                self.observer.record(probs, heads)
            out = attn.batch_to_head_dim(torch.bmm(probs, v))
        else:
            def split(x):
                return x.view(x.shape[0], -1, heads, x.shape[-1] // heads).transpose(1, 2)

            q, k, v = split(query), split(key), split(value)
            if controlled and (ctl.self_active or (ctl.mutual_active and self.decoder)):
                n = ctl.n
                qs, qu, qt = q.split(n)
                ks, ku, kt = k.split(n)
                vs, vu, vt = v.split(n)
                if ctl.mutual_active and self.decoder:
                    ku, vu, kt_m, vt_m = ks, vs, ks, vs
                else:
                    kt_m, vt_m = kt, vt
                if ctl.self_active:  # the source's probabilities applied to the target's values
                    qt, kt, vt = qs, ks, vt
                else:
                    kt, vt = kt_m, vt_m
                q, k, v = torch.cat([qs, qu, qt]), torch.cat([ks, ku, kt]), torch.cat([vs, vu, vt])
            mask = None
            if attention_mask is not None:
                mask = attn.prepare_attention_mask(attention_mask, seq, batch)
                mask = mask.view(batch, heads, -1, mask.shape[-1])
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scale)
            out = out.transpose(1, 2).reshape(out.shape[0], -1, heads * out.shape[-1]).to(query.dtype)
        return attention_output(attn, out, residual, shape)


@contextlib.contextmanager
def attention_control(unet, control: AttentionControl | None):
    """Install :class:`UnifiedAttentionProcessor` on every attention layer of ``unet`` for the block;
    restore the previous processors on exit (also after an error). ``None`` or an inactive control
    installs nothing."""
    if control is None or not control.active:
        yield control
        return
    saved = unet.attn_processors
    unet.set_attn_processor({name: UnifiedAttentionProcessor(control, name, observer=proc)
                             for name, proc in saved.items()})
    try:
        yield control
    finally:
        unet.set_attn_processor(saved)
