"""Request bodies read as JSON whose objects name each key once (registry.importers._common.unique_keys,
as a JSON Lines file is read): `{"query": ..., "score": 1, "score": 0}` is refused, 422 naming the key,
where Python's parser kept the last value unsaid, as a repeated query parameter is (deps.single_valued_parameters).
"""
from __future__ import annotations

import json

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from registry.importers._common import DuplicateKey, json_limit_problem, unique_keys

__all__ = ["UniqueKeysRoute"]


class _UniqueKeysRequest(Request):
    async def json(self):
        if not hasattr(self, "_json"):
            try:
                self._json = json.loads(await self.body(), object_pairs_hook=unique_keys)
            except DuplicateKey as err:
                # FastAPI passes an HTTPException raised while reading the body through as it is; a 400
                # is answered as a 422 naming the body (errors._http), after the write check
                raise HTTPException(400, detail=str(err)) from None
            except ValueError as err:
                if isinstance(err, json.JSONDecodeError):
                    raise  # FastAPI's own answer: "not JSON", with the character where it failed
                # Python's parser refuses an integer of more than 4,300 digits; FastAPI said only "There
                # was an error parsing the body"
                raise HTTPException(400, detail=json_limit_problem(err)) from None
        return self._json


class UniqueKeysRoute(APIRoute):
    """An APIRoute whose JSON body refuses a key given twice in one object."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def unique_keys_handler(request: Request):
            return await handler(_UniqueKeysRequest(request.scope, request.receive))

        return unique_keys_handler
