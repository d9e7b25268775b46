"""Writing files and folders so that a failed or killed run never leaves a half-written output nor blocks the next
run: one atomic file write (`write_atomic`), staging folders beside the output, an atomic folder swap, and the
recovery of what a killed run left. The bottom layer: the formats (export) and the retrieval (index) layers both use
it, and it imports nothing of hf_siamese."""

from .files import write_atomic, write_text_atomic
from .folders import recover_output, replace_folder, staging_folder

__all__ = ["recover_output", "replace_folder", "staging_folder", "write_atomic", "write_text_atomic"]
