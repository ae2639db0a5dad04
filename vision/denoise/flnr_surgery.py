"""Changes to a trained :class:`~vision.denoise.flnr.FLNR` that keep what it learned, for fine-tuning.

* :func:`pruned`: the guide head cut to its most useful hidden units (a faster model);
* :func:`with_outputs`: one more output row of the guide head for the antialias blend and/or the detail blend,
  every trained weight kept and the new rows starting where their blend does (almost) nothing.

The guide head's last layer writes, per pixel, :func:`head_rows` in this order: the Q learned guides, the
antialias logit (``antialias``), the detail logit (``detail``).
"""
from __future__ import annotations

import torch


def head_rows(config: dict) -> dict[str, int]:
    """Where each output of the guide head's last layer sits: ``{"guides": Q, "blend": i, "detail": j, "total": n}``
    (``blend`` and ``detail`` only when the configuration has them)."""
    rows = {"guides": int(config["guides"])}
    at = rows["guides"]
    for name, flag in (("blend", "antialias"), ("detail", "detail")):
        if config.get(flag):
            rows[name] = at
            at += 1
    rows["total"] = at
    return rows


def with_outputs(model, **flags):
    """A copy of ``model`` with ``antialias=True`` and/or ``detail=True``: every weight kept, the new logit rows of
    the guide head zero with the biases :data:`~vision.denoise.flnr.BLEND_BIAS` (antialias; and the gains
    :data:`~vision.denoise.flnr.EDGE_GAIN`) and :data:`~vision.denoise.flnr.DETAIL_BIAS` (detail), so it starts as
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
    index = list(range(old_rows["guides"])) + [new_rows[k] for k in ("blend", "detail") if k in old_rows]
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


def pruned(model, hidden: int, frames, fit_down: int | None = None):
    """A copy of ``model`` with the guide head cut to its ``hidden`` most useful units, to fine-tune into a faster
    model (``vision train-denoiser --init OLD --hidden 8``; the guide head is the largest per-pixel cost).

    ``frames``: (colour, guides dict) pairs (e.g. training frames) on which the head's hidden activations are
    sampled (every 7th pixel). A unit's use is the spread (standard deviation) of its activation times the norm
    of its column in the output layer; the units kept keep their weights and the network's code channels
    feeding them, and the mean output of the units dropped is folded into the output bias (their best constant
    stand-in). ``fit_down``: also change the regression's ``fit_down`` (default: keep)."""
    width = model.config["hidden"]
    if model.head_out is None or not 0 < int(hidden) <= width:
        raise ValueError(f"pruned needs a guide head with a hidden layer and 0 < hidden <= {width}, got {hidden}")
    model._record = []
    try:
        with torch.no_grad():
            for color, guides in frames:
                model(color, guides)
        acts = torch.cat(model._record) if model._record else None
    finally:
        model._record = None
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
