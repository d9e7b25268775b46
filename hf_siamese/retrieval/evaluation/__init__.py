"""The IR metrics of a model on a retrieval set (`evaluator.RetrievalEvaluator`) and the first-stage runs it scores
(`runs`)."""
