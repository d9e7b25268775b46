"""Staged recipes that combine the bi-encoder trainer with teachers and corpus data: Augmented SBERT
(`augmented_sbert`), adapting to a corpus without labels (`adapt`: SimCSE, TSDAE, cropping, inverse cloze, GPL) and
distilling a bi-encoder into a smaller (or another) one (`distill`). Each keeps its stages on disk, so a stopped run
resumes."""

from .adapt import METHODS, adapt, fit_margin_scale
from .augmented import augmented_sbert
from .distill import distill

__all__ = ["METHODS", "adapt", "augmented_sbert", "distill", "fit_margin_scale"]
