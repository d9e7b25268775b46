"""Exact search by a model's own scores, for the kinds whose score is not one vector's dot product: a learned-sparse
model's term weights (`sparse`) and a multi-vector model's MaxSim (`maxsim`), sharing `own`."""
