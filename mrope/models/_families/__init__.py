"""The released families, one module each: ``FAMILY = ModelFamily(...)``, read by the registry."""
