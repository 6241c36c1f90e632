"""The research schemes, one module each: ``SCHEME = ModelFamily(...)`` on a base family's ids and sizing."""
