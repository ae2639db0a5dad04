"""The acceptance targets that ``vision bench denoise`` prints under its tables, each with PASS or FAIL.

Every function prints its lines and returns whether its targets hold (True when none applies).
"""
from __future__ import annotations


def quality_targets(means: dict, real: bool, has_flip: bool, size: tuple[int, int]) -> bool:
    """FLR and FLNR against the noisy input and OIDN (mean PSNR and HDR-FLIP over the scenes; ``size`` (w, h)).

    ``means`` maps a method's row name to its mean metrics, e.g. ``{"flr": {"psnr": 30.1, "time": 0.01, ...}}``;
    ``real``: renderer files, where the generator-set targets do not apply.
    """
    w, h = size
    ok = True
    gain = means["flr"]["psnr"] - means["noisy"]["psnr"]
    if not real:
        verdict = "PASS" if gain >= 12 else "FAIL"
        ok &= gain >= 12
        print(f"target: FLR - noisy = {gain:+.2f} dB (>= 12): {verdict}")
    for peer in ("oidn high aux", "oidn fast aux"):
        if peer in means:
            print(f"FLR vs {peer}: {means['flr']['psnr'] - means[peer]['psnr']:+.2f} dB PSNR, time ratio (ours / "
                  f"peer) {means['flr']['time'] / means[peer]['time']:.2f} (at {w}x{h}; CPU ratios only)")
    if "flnr" in means and not real:
        m_f, m_r = means["flnr"], means["flr"]
        gain = m_f["psnr"] - m_r["psnr"]
        print(f"target: FLNR - FLR = {gain:+.2f} dB (>= 2): {'PASS' if gain >= 2 else 'FAIL'}")
        ok &= gain >= 2
        if "oidn high aux" in means:
            m_o = means["oidn high aux"]
            gap = m_f["psnr"] - m_o["psnr"]
            print(f"target: FLNR - OIDN high aux = {gap:+.2f} dB (>= -2): {'PASS' if gap >= -2 else 'FAIL'}")
            ok &= gap >= -2
            if has_flip:
                df = m_f["flip"] - m_o["flip"]
                print(f"target: HDR-FLIP FLNR - OIDN high aux = {df:+.4f} (<= 0.02): "
                      f"{'PASS' if df <= 0.02 else 'FAIL'}")
                ok &= df <= 0.02
    return ok


def upsampling_targets(means: dict) -> bool:
    """Joint upsampling from 1/2-resolution colour against full-resolution FLR (the 1/4 rows for reference)."""
    ok = True
    if "flr 1/2 mean" in means:
        full = means["flr"]["psnr"]
        parts, same, quarter = [], [], []
        for model in ("flr", "flnr"):
            if f"{model} 1/2 mean" in means:
                lm, lp, lq = (full - means[f"{model} 1/2 {how}"]["psnr"] for how in ("mean", "pick", "pick+phase"))
                parts.append(f"{model.upper()} {lm:+.2f} dB (2x2 means), {lp:+.2f} dB (one sample in four), "
                             f"{lq:+.2f} dB (one in four, phase known)")
                same.append(lm)
                quarter.append(lq)
        print(f"target: full-resolution FLR - joint upsampling from 1/2-resolution colour: {'; '.join(parts)} "
              f"(<= 1.5) with the same samples: {'PASS' if min(same) <= 1.5 else 'FAIL'}; with a quarter of the "
              f"samples (phase known): {'PASS' if min(quarter) <= 1.5 else 'FAIL'}")
        ok &= min(same) <= 1.5 and min(quarter) <= 1.5
    if "flr 1/4 pick+phase" in means:
        full = means["flr"]["psnr"]
        losses = [f"{model.upper()} {full - means[f'{model} 1/4 pick+phase']['psnr']:+.2f} dB"
                  for model in ("flr", "flnr") if f"{model} 1/4 pick+phase" in means]
        print(f"joint upsampling from 1/4-resolution colour (one sample in 16, phase known), loss against "
              f"full-resolution FLR: {', '.join(losses)} (for reference; the target is for 1/2)")
    return ok


def timing_targets(timing: dict | None, time_size: str | None) -> bool:
    """FLNR and temporal FLNR time against OIDN fast at ``--time-size`` (``timing``: seconds per method)."""
    ok = True
    if timing and "flnr" in timing and "oidn fast aux" in timing:
        ratio = timing["flnr"] / timing["oidn fast aux"]
        print(f"target: FLNR / OIDN fast time at {time_size} = {ratio:.2f} (<= 0.2): "
              f"{'PASS' if ratio <= 0.2 else 'FAIL'}")
        ok &= ratio <= 0.2
    if timing and "temporal flnr" in timing and "oidn fast aux" in timing:
        ratio = timing["temporal flnr"] / timing["oidn fast aux"]
        print(f"target: temporal FLNR / OIDN fast time at {time_size} = "
              f"{ratio:.2f} (<= 0.3): {'PASS' if ratio <= 0.3 else 'FAIL'}")
        ok &= ratio <= 0.3
    return ok
