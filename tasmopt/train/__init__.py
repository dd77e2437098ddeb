"""Learning (design §4): training pairs, supervised training, evaluation, corpus building."""
