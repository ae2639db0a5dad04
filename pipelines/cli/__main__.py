"""``python -m vision.pipelines.cli``: the ``vision`` command (as ``accelerate launch -m`` needs it)."""
import sys

from vision.pipelines.cli import main

sys.exit(main())
