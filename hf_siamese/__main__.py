"""`python -m hf_siamese ...`: the same command line as the `hf-siamese` console script."""

import sys

from .cli import main

sys.exit(main())
