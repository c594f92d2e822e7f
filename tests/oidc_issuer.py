"""A real OpenID Connect issuer on loopback for tests: discovery and JWKS over HTTP, keys the test
generates, and tokens signed with them (or deliberately wrong)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa


class Issuer:
    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}  # kid -> private key, published
        self.requests: list[str] = []
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                issuer.requests.append(self.path)
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks"}
                elif self.path == "/jwks":
                    body = {"keys": [issuer.public_jwk(kid, k) for kid, k in list(issuer.keys.items())]}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.kid = self.rotate()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "Issuer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def rotate(self, *, drop_old: bool = False, ec_key: bool = False) -> str:
        """Publishes a new signing key (and by default keeps the old ones); returns its kid."""
        kid = uuid.uuid4().hex[:12]
        key = ec.generate_private_key(ec.SECP256R1()) if ec_key else rsa.generate_private_key(65537, 2048)
        if drop_old:
            self.keys.clear()
        self.keys[kid] = key
        self.kid = kid
        return kid

    @staticmethod
    def public_jwk(kid: str, key: Any) -> dict[str, Any]:
        alg = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"
        algo = jwt.algorithms.ECAlgorithm if alg == "ES256" else jwt.algorithms.RSAAlgorithm
        jwk = json.loads(algo.to_jwk(key.public_key()))
        return {**jwk, "kid": kid, "alg": alg, "use": "sig"}

    def token(self, sub: str = "ada", *, email: str | None = "ada@example.com", groups: list[str] | None = None,
              aud: str = "relay", iss: str | None = None, ttl: int = 300, kid: str | None = None,
              key: Any = None, alg: str | None = None, **extra: Any) -> str:
        kid = kid or self.kid
        key = key if key is not None else self.keys[kid]
        now = int(time.time())
        claims: dict[str, Any] = {"sub": sub, "aud": aud, "iss": iss or self.url, "iat": now - 5, "exp": now + ttl,
                                  "name": sub.title(), **extra}
        if email is not None:
            claims["email"] = email
            claims.setdefault("email_verified", True)
        if groups is not None:
            claims["groups"] = groups
        if alg is None:
            alg = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"
        return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})
