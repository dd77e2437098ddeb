"""The neural candidate source: graph encoder, decoder, grammar mask, beam search and
checkpoints (design §3). Entry points: `tasmopt.model.source.load_model_source` and
`tasmopt.model.checkpoint.read_config`."""
