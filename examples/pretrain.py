"""The pretraining comparison of 4-bit training recipes: the same as ``fp4spec train``.

    python examples/pretrain.py --recipe nvfp4 --seed 0 --out runs/nvfp4-s0 --tokens 40e6

See docs/training.md; ``fp4spec train-summary runs/`` tabulates and plots the runs.
"""

import sys

from fp4spec.training.pretrain import main

if __name__ == "__main__":
    sys.exit(main())
