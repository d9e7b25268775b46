"""`python -m hf_siamese.cli ...`: the same command line as `hf-siamese` and `python -m hf_siamese`."""

import sys

from . import main

sys.exit(main())
