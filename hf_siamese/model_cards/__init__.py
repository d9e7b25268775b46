"""Model card templates, installed with the package as `hf_siamese.model_cards`."""
