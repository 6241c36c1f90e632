"""The service's FastAPI app class: its OpenAPI schema also documents the JSON bodies that routes read
themselves.

``POST /v1/positions`` and ``POST /v1/rope-index`` read and validate their bodies with
:mod:`mrope.service._jsonbody`, not through a FastAPI body parameter, so FastAPI neither describes their
request bodies nor collects those models into ``components/schemas``. A route declares its body with
:meth:`ServiceApp.json_body` (its ``openapi_extra``); :meth:`ServiceApp.openapi` adds the declared
models' schemas to the components.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel


def model_components(model: type[BaseModel]) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The ``components/schemas`` entries of ``model``: the models it nests (its ``$defs``), then itself."""
    found = model.model_json_schema(ref_template="#/components/schemas/{model}")
    return (*found.pop("$defs", {}).items(), (model.__name__, found))


class ServiceApp(FastAPI):
    """A FastAPI app whose OpenAPI schema includes the request models of :meth:`json_body`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.body_models: list[type[BaseModel]] = []

    def json_body(self, model: type[BaseModel]) -> dict[str, Any]:
        """The ``openapi_extra`` of a route that reads a JSON ``model`` body itself; the model's schema
        goes into the app's components."""
        if model not in self.body_models:
            self.body_models.append(model)
        return {
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
                },
            }
        }

    def openapi(self) -> dict[str, Any]:
        """FastAPI's OpenAPI schema (generated once per set of routes) with the body models' schemas in
        ``components/schemas``; a nested model FastAPI already lists keeps FastAPI's entry."""
        schema = super().openapi()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in self.body_models:
            if model.__name__ in components:
                continue
            *nested, (name, own) = model_components(model)
            for sub_name, sub in nested:
                components.setdefault(sub_name, sub)
            components[name] = own
        return schema
