"""Staged recipes that combine the bi-encoder trainer with cross-encoder teachers and corpus data: Augmented SBERT
(`augmented_sbert`) and adapting to a corpus without labels (`adapt`: SimCSE, TSDAE, cropping, inverse cloze, GPL).
Each keeps its stages in a run folder, so a stopped run resumes."""

from .adapt import METHODS, adapt, fit_margin_scale
from .augmented import augmented_sbert

__all__ = ["METHODS", "adapt", "augmented_sbert", "fit_margin_scale"]
