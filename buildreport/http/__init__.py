"""The HTTP face: the Litestar application, its routes (the JSON API, the signed pages, the docs and the
metrics), the token check, and the server that runs it."""
