"""The API's documentation, served by buildreport itself: the OpenAPI document and a page that shows it.

Litestar generates the document from the handlers and the msgspec structs. `finish_document` then adds
what the handlers cannot say about themselves (the headers every answer carries, the 304, 405 and 503
answers) and makes exact what the generator approximates (64-bit integer bounds written as floats).
The page at /docs is rendered on the server from the same document: no script, nothing from elsewhere.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any
from urllib.parse import urlsplit

import msgspec
from litestar import MediaType, Request, Response, Router
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin
from markupsafe import Markup, escape

from buildreport.errors import problem_type
from buildreport.http.pages import PAGE_HEADERS, render_page
from buildreport.models import Problem
from buildreport.recordschema import finish_write_operation

JSON = dict[str, Any]
MAX_INT64 = 2**63 - 1
API_TAG = "builds"
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

_HEADERS: JSON = {
    "ETag": {"description": "A validator of this answer: send it back in `If-None-Match` to get a 304.",
             "schema": {"type": "string"}},
    "Cache-Control": {"description": "`private, no-cache`: clients revalidate with the ETag.",
                      "schema": {"type": "string"}},
    "Vary": {"description": "`Authorization`: answers differ between tokens.", "schema": {"type": "string"}},
    "Link": {"description": 'The next page, `<URL>; rel="next"` (RFC 8288), when more builds match than were '
                            "returned.", "schema": {"type": "string"}},
    "X-Request-ID": {"description": "The request's id (the client's own when it sent a reasonable one); server "
                                    "log lines carry it too.", "schema": {"type": "string", "minLength": 1}},
    "RateLimit-Limit": {"description": "Requests a minute this token may make (when rate limiting is on).",
                        "schema": {"type": "integer", "minimum": 1}},
    "RateLimit-Remaining": {"description": "Requests left in the current minute (when rate limiting is on).",
                            "schema": {"type": "integer", "minimum": 0}},
    "RateLimit-Reset": {"description": "Seconds until the current minute ends (when rate limiting is on).",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 60}},
    "Retry-After": {"description": "Seconds to wait before trying again.",
                    "schema": {"type": "integer", "minimum": 0}},
    "WWW-Authenticate": {"description": 'The bearer challenge (RFC 6750): `Bearer realm="buildreport"`, with '
                                        "`error` when a token was sent.", "schema": {"type": "string"}},
    "Allow": {"description": "The methods the path answers: `GET, HEAD`.", "schema": {"type": "string"}},
}
_RATE = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
_PROBLEM = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
IF_NONE_MATCH: JSON = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "description": "An ETag from an earlier answer (or `*`): when it still matches, the answer is a 304 "
    "with no body.",
    "schema": {"type": "string"},
}


def _refs(*names: str, required: tuple[str, ...] = ()) -> JSON:
    return {
        name: {"$ref": f"#/components/headers/{name}"} if name not in required
        else {**_HEADERS[name], "required": True}
        for name in names
    }


def _exact_integers(node: Any) -> Any:
    """Integer bounds as integers: the generator writes 2**63 - 1 as the float 2**63, one past the limit."""
    if isinstance(node, dict):
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            value = node.get(key)
            if isinstance(value, float) and value.is_integer():
                node[key] = MAX_INT64 if value >= MAX_INT64 else int(value)
        for value in node.values():
            _exact_integers(value)
    elif isinstance(node, list):
        for value in node:
            _exact_integers(value)
    return node


def _single_refs(node: Any) -> Any:
    """`allOf` around one `$ref` (how the generator attaches a description) as the `$ref` itself (OpenAPI 3.1)."""
    if isinstance(node, dict):
        all_of = node.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and set(all_of[0]) == {"$ref"}:
            del node["allOf"]
            node["$ref"] = all_of[0]["$ref"]
        for value in node.values():
            _single_refs(value)
    elif isinstance(node, list):
        for value in node:
            _single_refs(value)
    return node


# Answers streamed as they are read carry no ETag: it would need the whole body first.
STREAMED = frozenset({"/builds/export"})


def _api_operation(path: str, operation: JSON) -> None:
    """Headers and answers every API operation shares, beside the ones its handler declares."""
    responses = operation["responses"]
    ok = responses.get("200", {})
    if path in STREAMED:
        ok["headers"] = _refs("Cache-Control", "Vary", "X-Request-ID", *_RATE, required=("X-Request-ID",))
        text = {"schema": {"type": "string"}}
        ok["content"] = {"application/x-ndjson": dict(text), "text/csv": dict(text)}
    else:
        operation.setdefault("parameters", []).append(dict(IF_NONE_MATCH))
        ok["headers"] = _refs(
            "ETag", "Cache-Control", "Vary", "X-Request-ID", *_RATE, required=("ETag", "X-Request-ID")
        )
        responses["304"] = {
            "description": "Not modified: the `If-None-Match` ETag still matches. No body.",
            "headers": _refs(
                "ETag", "Cache-Control", "Vary", "X-Request-ID", *_RATE, required=("ETag", "X-Request-ID")
            ),
        }
    if path == "/builds":
        ok["headers"]["Link"] = {"$ref": "#/components/headers/Link"}
    for code, answer in responses.items():
        if code.startswith(("4", "5")):
            answer.setdefault("headers", {}).update(_refs("X-Request-ID", required=("X-Request-ID",)))
    for code in ("401", "403"):
        if code in responses:
            responses[code]["headers"].update(_refs("WWW-Authenticate", required=("WWW-Authenticate",)))
    if "429" in responses:
        responses["429"]["headers"].update(_refs("Retry-After", *_RATE, required=("Retry-After",)))
    _shared_failures(responses)


def _shared_failures(responses: JSON) -> None:
    responses["405"] = {
        "description": "Any method but GET or HEAD.",
        "headers": _refs("Allow", "X-Request-ID", required=("Allow", "X-Request-ID")),
        "content": copy.deepcopy(_PROBLEM),
    }
    responses["503"] = {
        "description": "The database cannot be read right now, or the server is busy: more requests were "
        "waiting for a database connection (or a turn to compute statistics) than its queue holds, or one "
        "waited as long as the queue allows (`serve --queue-length`, `--queue-wait`). `Retry-After` says when "
        "to try again.",
        "headers": _refs("Retry-After", "X-Request-ID", required=("X-Request-ID",)),
        "content": copy.deepcopy(_PROBLEM),
    }


def finish_document(document: JSON, base_url: str, max_records: int) -> JSON:
    """The generated document, made exact; `base_url` is where the service is reached (its path included)."""
    doc = _single_refs(_exact_integers(copy.deepcopy(document)))
    finish_write_operation(doc, max_records)
    doc["servers"] = [{"url": base_url, "description": "This service."}]
    doc.setdefault("components", {})["headers"] = copy.deepcopy(_HEADERS)
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method not in _METHODS:
                continue
            if method == "get" and API_TAG in operation.get("tags", ()):
                _api_operation(path, operation)
                continue
            for code, answer in operation["responses"].items():
                answer.setdefault("headers", {}).update(_refs("X-Request-ID", required=("X-Request-ID",)))
                if code in ("401", "403"):
                    answer["headers"].update(_refs("WWW-Authenticate", required=("WWW-Authenticate",)))
            health = operation["responses"].get("503") if path == "/healthz" else None
            _shared_failures(operation["responses"])
            if health is not None:  # /healthz says what is wrong in its own shape
                operation["responses"]["503"] = health
    return doc


async def _problem_for_unknown(response: Response[Any]) -> Response[Any]:
    """Litestar answers an unknown path under /docs with an HTML page; the API's problem document instead."""
    if response.status_code != 404:
        return response
    kind, title = problem_type(404)
    body = msgspec.json.encode(Problem(type=kind, title=title, status=404, detail="No such resource"))
    return Response(content=body, status_code=404, media_type="application/problem+json")


def docs_router() -> Router:
    """Where Litestar mounts the two plugins below: the page's headers, and problem documents for the rest."""
    return Router(
        path="/docs",
        route_handlers=[],
        include_in_schema=False,
        response_headers=PAGE_HEADERS,
        after_request=_problem_for_unknown,
    )


class ExactJsonPlugin(JsonRenderPlugin):
    """`/docs/openapi.json`: the finished document, encoded once."""

    def __init__(self) -> None:
        super().__init__(path="/openapi.json")
        self._body: bytes | None = None

    def render(self, request: Request[Any, Any, Any], openapi_schema: JSON) -> bytes:
        if self._body is None:
            settings = request.app.state.settings
            self._body = json.dumps(finish_document(openapi_schema, settings.base_url, settings.max_records)).encode()
        return self._body


class DocsPagePlugin(OpenAPIRenderPlugin):
    """`/docs`: the document as a page, rendered here from the same finished document."""

    def __init__(self) -> None:
        super().__init__(path="/", media_type=MediaType.HTML)
        self._body: bytes | None = None

    def render(self, request: Request[Any, Any, Any], openapi_schema: JSON) -> bytes:
        if self._body is None:
            settings = request.app.state.settings
            base_url = settings.base_url
            doc = finish_document(openapi_schema, base_url, settings.max_records)
            self._body = render_page(request, "docs.html", **page_values(doc, base_url))
        return self._body


_CODE = re.compile(r"`([^`]+)`")
SHOWN_PATTERN_LENGTH = 80  # longer ones (the list of statuses) are in the description and the schemas


def _prose(text: str) -> Markup:
    """A description as HTML: escaped, with `code` spans."""
    return Markup(_CODE.sub(r"<code>\1</code>", str(escape(text))))


def _type_text(schema: JSON) -> str:
    """A schema in a few words: `integer 1…10000`, `Build[]`, `string | null`."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    for key in ("oneOf", "anyOf"):
        if key in schema:
            inherited = {k: v for k, v in schema.items() if k not in ("oneOf", "anyOf", "examples")}
            return " | ".join(_type_text({**inherited, **s}) for s in schema[key])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " | ".join(kind)
    if kind == "array":
        return _type_text(schema.get("items", {})) + "[]"
    if kind == "object" and "additionalProperties" in schema:
        return f"object of {_type_text(schema['additionalProperties'])}"
    text = kind + (f" ({schema['format']})" if "format" in schema else "")
    if "enum" in schema:
        text += ": " + ", ".join(str(v) for v in schema["enum"])
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None or high is not None:
        text += f" {'' if low is None else low}…{'' if high is None else high}"
    if schema.get("minLength"):
        text += f", at least {schema['minLength']} character{'s' if schema['minLength'] != 1 else ''}"
    if len(schema.get("pattern", "")) <= SHOWN_PATTERN_LENGTH and "pattern" in schema:
        text += f", matching {schema['pattern']}"
    return text


def page_values(doc: JSON, base_url: str) -> JSON:
    """What docs.html shows: operations with their parameters and answers, then every schema."""
    operations = []
    for path, item in doc["paths"].items():
        operation = item["get"]
        operations.append({
            "id": operation.get("operationId", path),
            "path": path,
            "summary": operation.get("summary", ""),
            "description": _prose(operation.get("description", "")),
            "secured": bool(operation.get("security")),
            "parameters": [
                {"name": p["name"], "in": p["in"], "required": p.get("required", False),
                 "type": _type_text(p.get("schema", {})), "description": _prose(p.get("description", ""))}
                for p in operation.get("parameters", [])
            ],
            "responses": [
                {"code": code, "description": _prose(answer.get("description", "")),
                 "type": next((_type_text(m["schema"]) for m in answer.get("content", {}).values()), ""),
                 "headers": sorted(answer.get("headers", {}))}
                for code, answer in sorted(operation["responses"].items())
            ],
        })
    schemas = []
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        required = set(schema.get("required", ()))
        schemas.append({
            "name": name,
            "description": _prose(schema.get("description", "")),
            "type": "" if "properties" in schema else _type_text(schema),
            "properties": [
                {"name": field, "type": _type_text(sub), "required": field in required,
                 "description": _prose(sub.get("description", ""))}
                for field, sub in schema.get("properties", {}).items()
            ],
        })
    return {
        "title": doc["info"]["title"],
        "version": doc["info"]["version"],
        "description": _prose(doc["info"].get("description", "")),
        "base_url": base_url,
        "document_url": urlsplit(base_url).path.rstrip("/") + "/docs/openapi.json",
        "operations": operations,
        "schemas": schemas,
        "icon": "link",
    }
