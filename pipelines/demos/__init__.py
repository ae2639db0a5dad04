"""The sections of `vision demo`: each module exposes ``TITLE`` and ``run(out_dir, device) -> list[Path]``."""
