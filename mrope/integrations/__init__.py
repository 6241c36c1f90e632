"""mrope inside other libraries' models.

- :mod:`mrope.integrations.transformers`: :func:`~mrope.integrations.transformers.patch` a loaded
  transformers vision-language model so that its positions come from :func:`mrope.get_rope_index` and its
  rotary application from :func:`mrope.apply_mrope`; :func:`~mrope.integrations.transformers.unpatch`
  restores it exactly.

Tiny random-weight models to try it on are test support: :mod:`mrope.testing._tiny`. Importing this package imports neither torch nor
transformers; its submodules do.
"""

__all__: list[str] = []
