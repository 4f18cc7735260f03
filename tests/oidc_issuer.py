"""An OIDC issuer for tests: a threaded HTTP server on 127.0.0.1 serving a discovery document and a key set
(RSA, EC and Ed25519 keys made with `cryptography`) that can be rotated, and ID tokens signed with its keys."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

AUDIENCE = "nixbuild.net"


def new_key(kind: str) -> Any:
    if kind == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def public_jwk(key: Any, kid: str, alg: str) -> dict[str, Any]:
    algorithm = {"RS256": RSAAlgorithm, "ES256": ECAlgorithm, "EdDSA": OKPAlgorithm}[alg]
    jwk = algorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


class Issuer:
    """Serves `/.well-known/openid-configuration` and `/jwks`; `requests` counts the key sets served."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[Any, str]] = {}  # kid -> (private key, alg)
        self.published: list[str] = []
        self.requests = 0
        self.jwks_path = "/jwks"  # "/moved" names a path that redirects to the key set
        self.padding = 0  # bytes of white space after the key set
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": issuer.url + issuer.jwks_path}
                elif self.path == "/moved":
                    self.send_response(302)
                    self.send_header("Location", issuer.url + "/jwks")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                elif self.path == "/jwks":
                    issuer.requests += 1
                    body = {"keys": [public_jwk(issuer.keys[k][0], k, issuer.keys[k][1]) for k in issuer.published]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode() + b" " * (issuer.padding if self.path == "/jwks" else 0)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Issuer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def add_key(self, kid: str, alg: str = "RS256", publish: bool = True) -> None:
        self.keys[kid] = (new_key(alg), alg)
        if publish:
            self.published.append(kid)

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": self.url, "aud": AUDIENCE, "iat": now, "nbf": now, "exp": now + 300,
            "sub": "repo:acme/web:ref:refs/heads/main", "repository": "acme/web", "repository_owner": "acme",
            "ref": "refs/heads/main", "sha": "a" * 40, "run_id": "4242", "run_attempt": "1",
            "workflow": "CI",
        }  # fmt: skip
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, kid: str = "k1", headers: dict[str, Any] | None = None, **overrides: Any) -> str:
        key, alg = self.keys[kid]
        return jwt.encode(self.claims(**overrides), key, algorithm=alg, headers={"kid": kid, **(headers or {})})
