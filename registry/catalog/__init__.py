"""The catalog: models and their versions, aliases, how adds and refines land, imports, embedding, the store's format migrations."""
