"""Hard-negative mining: (anchor, positive) rows -> rows with negatives the model finds (`negatives`), over a corpus of
any size (`corpus`), by a dense, learned-sparse (`sparse`) or hybrid first stage."""
