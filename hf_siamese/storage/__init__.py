"""Writing folders so that a failed or killed run never leaves a half-written output nor blocks the next run: staging
folders beside the output, an atomic swap, and the recovery of what a killed run left. The bottom layer: the formats
(export) and the retrieval (index) layers both use it, and it imports nothing of hf_siamese."""

from .folders import recover_output, replace_folder, staging_folder

__all__ = ["recover_output", "replace_folder", "staging_folder"]
