"""Torch-free contracts: error types, file names, manifests, safe writes, run records, output folders and locks."""
