"""Test support shared by the test modules: media files, checkpoints, transformers references, servers."""
