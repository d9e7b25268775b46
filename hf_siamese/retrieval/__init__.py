"""Retrieval with an encoder: IR metrics of a model on a retrieval set, hard-negative mining, the persistent vector
index and the model fingerprint it records, and corpus embedding into resumable Parquet shards (`corpus`). Imports
modeling, data and metrics.
"""
