"""The HTTP layer: endpoints, API adapters, middleware, the OpenAPI document and the web page."""
