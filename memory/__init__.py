"""The experience bank: trajectories, the append-only logs they live in, and (on Chroma) the
queryable view used for retrieval and curation."""
