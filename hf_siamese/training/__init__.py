"""Training: `SiameseTrainer` (a `transformers.Trainer`) and its data / evaluation mixins, the pair collator, the
no-duplicates samplers, stream handling and weight averaging. Imports modeling, losses, data, metrics, retrieval
(retrieval eval sets) and formats (the model card of `push_to_hub`).
"""
