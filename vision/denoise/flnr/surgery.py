"""Changes to a trained :class:`~.model.FLNR` that keep what it learned, for fine-tuning.

* :func:`pruned`: the guide head cut to its most useful hidden units (a faster model);
* :func:`with_history`: the network also reads the history length (one more input channel, its weights 0);
  :func:`train_history_only` leaves only those weights to train;
* :func:`with_outputs`: one more output row of the guide head for the antialias blend and/or the detail blend,
  every trained weight kept and the new rows starting where their blend does (almost) nothing.

The guide head's last layer writes, per pixel, :func:`head_rows` in this order: the Q learned guides, the
antialias logit (``antialias``), the detail logit (``detail``).
"""
from __future__ import annotations

import torch

GUIDE_START = 0.02  # a new learned guide's weights, relative to the old guides' (see :func:`widened`)
PRUNE_STRIDE = 7  # :func:`pruned` samples every 7th pixel's hidden activations


BLENDS = (("blend", "antialias"), ("detail", "detail"))  # head row, configuration key


def head_rows(config: dict) -> dict[str, int]:
    """Where each output of the guide head's last layer sits: ``{"guides": Q, "blend": i, "detail": j, "total": n}``
    (``blend`` and ``detail`` only when the configuration has them)."""
    rows = {"guides": int(config["guides"])}
    at = rows["guides"]
    for name, flag in BLENDS:
        if config.get(flag):
            rows[name] = at
            at += 1
    rows["total"] = at
    return rows


def with_outputs(model, **flags):
    """A copy of ``model`` with ``antialias=True`` and/or ``detail=True``: every weight kept, the new logit rows of
    the guide head zero with the biases :data:`~.model.BLEND_BIAS` (antialias; and the gains
    :data:`~.model.EDGE_GAIN`) and :data:`~.model.DETAIL_BIAS` (detail), so it starts as
    ``model`` plus a blend at albedo edges (antialias) and a detail weight of sigmoid(-6) = 0.25 % (detail).

    Needs a guide head with a hidden layer (the logits are rows of its last layer; a linear head's rows are the
    network's code). A model that has the flags already comes back as a copy."""
    if model.head_out is None:
        raise ValueError(f"adding {' and '.join(flags)} needs a guide head with a hidden layer (hidden > 0); train a "
                         "linear-head model with it from the start instead")
    config = dict(model.config, **{k: bool(v) or bool(model.config.get(k)) for k, v in flags.items()})
    new = type(model)(**config).to(model.log_eps)
    old_rows, new_rows = head_rows(model.config), head_rows(config)
    # each old output row goes to the row of the same name; the rows new to the model keep their initialisation
    index = list(range(old_rows["guides"])) + [new_rows[k] for k, _ in BLENDS if k in old_rows]
    state = new.state_dict()
    added = [i for i in range(new_rows["total"]) if i not in index]
    state["head_out.weight"][added] = 0.0  # the new logits start as their biases alone
    for k, v in model.state_dict().items():
        if k in ("head_out.weight", "head_out.bias"):
            state[k][index] = v
        elif k in state:
            state[k] = v.clone()
    new.load_state_dict(state)
    return new.train(model.training)


def with_history(model):
    """A copy of ``model`` whose cell network also reads the history length (``history=True``,
    :func:`~.cells.history_input`): every weight kept and the stem's weights on the new input 0,
    so it computes what ``model`` does until fine-tuned. A model that reads it already comes back as a copy."""
    new = type(model)(**dict(model.config, history=True)).to(model.log_eps)
    state = new.state_dict()
    for k, v in model.state_dict().items():
        if k == "net.stem.0.weight" and v.shape[1] < state[k].shape[1]:
            state[k].zero_()
            state[k][:, :v.shape[1]] = v
        else:
            state[k] = v.clone()
    new.load_state_dict(state)
    return new.train(model.training)


def train_history_only(model):
    """Freeze every weight of ``model`` (built with ``history=True``) except the cell network's weights on the history
    input (one column of the stem), whose gradient is masked to that column: fine-tuned this way (Adam, no weight
    decay: a zero gradient moves nothing), the model still gives every single frame (history 1: the input is 0) the
    result it gave before, bit for bit. Returns ``model``."""
    if not model.config.get("history"):
        raise ValueError("train_history_only needs a model with the history input (with_history() adds it)")
    for p in model.parameters():
        p.requires_grad_(False)
    stem = model.net.stem[0].weight
    stem.requires_grad_(True)
    mask = torch.zeros_like(stem)
    mask[:, -1] = 1.0
    stem.register_hook(lambda grad: grad * mask)
    return model


def pruned(model, hidden: int, frames, fit_down: int | None = None):
    """A copy of ``model`` with the guide head cut to its ``hidden`` most useful units, to fine-tune into a faster
    model (``vision train-denoiser --init OLD --hidden 8``; the guide head is the largest per-pixel cost).

    ``frames``: (colour, guides dict) pairs (e.g. training frames) on which the head's hidden activations are
    sampled (every 7th pixel), by a forward pre-hook on the head's output layer, whose input they are (while the
    layer is hooked the model runs its head in PyTorch on the whole frame). A unit's use is the spread (standard
    deviation) of its activation times the norm of its column in the output layer; the units kept keep their weights
    and the network's code channels feeding them, and the mean output of the units dropped is folded into the output
    bias (their best constant stand-in). ``fit_down``: also change the regression's ``fit_down`` (default: keep)."""
    width = model.config["hidden"]
    if model.head_out is None or not 0 < int(hidden) <= width:
        raise ValueError(f"pruned needs a guide head with a hidden layer and 0 < hidden <= {width}, got {hidden}")
    record = []
    hook = model.head_out.register_forward_pre_hook(
        lambda layer, args: record.append(args[0].detach()[::PRUNE_STRIDE].clone()))
    try:
        with torch.no_grad():
            for color, guides in frames:
                model(color, guides)
    finally:
        hook.remove()
    acts = torch.cat(record) if record else None
    if acts is None:
        raise ValueError("pruned needs at least one frame to measure the guide head on")
    w2 = model.head_out.weight.detach()
    use = acts.std(0) * w2.norm(dim=0)
    keep = torch.argsort(use, descending=True)[: int(hidden)].sort().values
    kept = set(keep.tolist())
    drop = torch.tensor([j for j in range(width) if j not in kept], dtype=torch.long)
    cfg = dict(model.config, hidden=int(hidden))
    cfg["fit_down"] = cfg["fit_down"] if fit_down is None else int(fit_down)
    new = type(model)(**cfg).to(model.log_eps)
    state = new.state_dict()
    code = torch.cat([keep, torch.arange(width, model.net.out.out_channels)])  # the code, then the radius logits
    for k, v in model.state_dict().items():
        v = v.detach()
        if k in ("net.out.weight", "net.out.bias"):
            state[k] = v[code].clone()
        elif k.startswith("head_in."):
            state[k] = v[keep].clone()
        elif k == "head_out.weight":
            state[k] = v[:, keep].clone()
        elif k == "head_out.bias":
            state[k] = v + w2[:, drop] @ acts.mean(0)[drop]
        else:
            state[k] = v.clone()
    new.load_state_dict(state)
    return new.train(model.training)


def _concat(maps, sizes_new) -> torch.Tensor:
    """The new position of each old channel of a concatenation of levels whose new sizes are ``sizes_new``."""
    out, at = [], 0
    for m, n in zip(maps, sizes_new):
        out.append(m + at)
        at += n
    return torch.cat(out)


def widened(model, guides: int | None = None, hidden: int | None = None, widths=None, seed: int = 0):
    """A copy of ``model`` with more learned guides, a wider guide head and/or a wider cell network that computes
    the same function (to rounding; a new learned guide moves it by about 1e-4, see below), to fine-tune into a model
    with more capacity (``vision train-denoiser --init OLD --guides 5 --hidden 16 --widths 16,24,64,96``).

    Every trained weight is kept. The new units start from PyTorch's default initialisation on their inputs and
    with zero weight on every old unit, so they change nothing until training moves them. A new learned guide
    cannot start as exactly 0 (the regression would give it slope 0 and no gradient could move it: the fit's
    first-order change is slope x change + change x 0). It starts as a random mix of the head's units at
    :data:`GUIDE_START` of the old guides' weight scale: the ridge keeps its slope as small, so the result moves by
    their product (about 1e-4 of its range). Widths and counts can only grow here (:func:`pruned` shrinks the
    guide head)."""
    cfg = dict(model.config)
    new_cfg = dict(cfg, guides=int(cfg["guides"] if guides is None else guides),
                   hidden=int(cfg["hidden"] if hidden is None else hidden),
                   widths=[int(w) for w in (cfg["widths"] if widths is None else widths)])
    if len(new_cfg["widths"]) != len(cfg["widths"]) or any(n < o for n, o in zip(new_cfg["widths"], cfg["widths"])) \
            or new_cfg["guides"] < cfg["guides"] or new_cfg["hidden"] < cfg["hidden"] or new_cfg["guides"] > 8:
        raise ValueError(f"widened keeps the number of levels and only grows: widths {cfg['widths']} -> "
                         f"{new_cfg['widths']}, guides {cfg['guides']} -> {new_cfg['guides']} (at most 8), hidden "
                         f"{cfg['hidden']} -> {new_cfg['hidden']}")
    if cfg["hidden"] == 0 and new_cfg["hidden"] != 0:
        raise ValueError("widened cannot give a linear guide head (hidden 0) a hidden layer; train that from scratch")
    with torch.random.fork_rng(devices=[]):  # the new units' initialisation, seeded; the caller's RNG untouched
        torch.manual_seed(seed)
        return _widened(model, cfg, new_cfg)


def _widened(model, cfg: dict, new_cfg: dict):
    new = type(model)(**new_cfg).to(model.log_eps)
    wo, wn = cfg["widths"], new_cfg["widths"]
    lv = [torch.arange(o) for o in wo]  # old channels keep their index in each level; the new ones come after
    code_o, code_n = model.net.out.out_channels - len(cfg["radii"]), new.net.out.out_channels - len(cfg["radii"])
    rows_o, rows_n = head_rows(cfg), head_rows(new_cfg)
    head = torch.tensor(list(range(rows_o["guides"])) + [rows_n[k] for k, _ in BLENDS if k in rows_o])
    maps = {"net.stem.0": (lv[0], None), "net.top.0": (lv[0], _concat([lv[1], lv[0]], [wn[1], wn[0]])),
            "net.out": (torch.cat([torch.arange(code_o), code_n + torch.arange(len(cfg["radii"]))]), lv[0]),
            "head_in": (torch.arange(code_o), None), "head_out": (head, torch.arange(cfg["hidden"]))}
    for i in range(len(wo) - 1):
        maps[f"net.down.{i}.0"] = (lv[i + 1], lv[i])
        maps[f"net.down.{i}.2"] = (lv[i + 1], lv[i + 1])
    for j, i in enumerate(range(len(wo) - 2, 0, -1)):
        maps[f"net.up.{j}.0"] = (lv[i], _concat([lv[i + 1], lv[i]], [wn[i + 1], wn[i]]))
    if cfg["hidden"] == 0:  # a linear head: head_in and the code write the outputs directly, in the outputs' order
        maps["head_in"] = (head, None)
        maps["net.out"] = (torch.cat([head, code_n + torch.arange(len(cfg["radii"]))]), lv[0])
    state = new.state_dict()
    for k, v in model.state_dict().items():
        v = v.detach()
        layer, _, kind = k.rpartition(".")
        if layer not in maps:
            state[k] = v.clone() if k != "log_eps" else torch.cat([v, v.new_full((new_cfg["guides"] - len(v),),
                                                                                  float(v.mean()))])
            continue
        out_map, in_map = maps[layer]
        out_map = torch.arange(v.shape[0]) if out_map is None else out_map
        t = state[k]
        if kind == "bias":
            t[out_map] = v
            continue
        if in_map is not None:
            full = t[out_map]
            full.zero_()  # an old unit reads nothing from the new ones
            full[:, in_map] = v
            t[out_map] = full
        else:
            t[out_map] = v
    # a new learned guide: GUIDE_START times the old guides' weight scale, random, so it barely changes the fit
    # (its slope and its values are both that small: the change is of their product) but has a gradient (a guide
    # that is exactly 0 has none: the first-order change of slope x guide is 0 x change + change x 0)
    added = [i for i in range(rows_n["total"]) if i not in head.tolist()]
    last = "head_out" if new_cfg["hidden"] else "head_in"
    for name in (last,) if new_cfg["hidden"] else (last, "net.out"):  # a linear head's outputs also take the code
        w = state[f"{name}.weight"]
        scale = GUIDE_START * float(w[: rows_o["guides"]].pow(2).mean().sqrt())
        w[added] = torch.randn_like(w[added]) * scale
        state[f"{name}.bias"][added] = 0.0
    new.load_state_dict(state)
    return new.train(model.training)
