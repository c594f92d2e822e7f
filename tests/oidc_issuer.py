"""A real OpenID Connect issuer on loopback for tests: discovery and JWKS over HTTP, keys the test
generates (RSA, EC P-256 or P-384, Ed25519, Ed448; published with their ``alg`` or, as Entra ID does,
without), and tokens signed with them (or deliberately wrong). It can trickle its headers, a line at a
time, as a slow issuer does."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

KINDS = {"rsa": lambda: rsa.generate_private_key(65537, 2048), "ec": lambda: ec.generate_private_key(ec.SECP256R1()),
         "ec384": lambda: ec.generate_private_key(ec.SECP384R1()), "ed25519": ed25519.Ed25519PrivateKey.generate,
         "ed448": ed448.Ed448PrivateKey.generate}


def algorithm_of(key: Any) -> str:
    """The algorithm a private key of :data:`KINDS` signs with by default."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return {"secp256r1": "ES256", "secp384r1": "ES384"}[key.curve.name]
    return "EdDSA" if isinstance(key, (ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)) else "RS256"


class Issuer:
    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}  # kid -> private key, published
        self.requests: list[str] = []
        self.publish_alg = True  # False: keys without "alg", as Entra ID publishes them
        self.trickle = 0  # header lines sent one by one (every TRICKLE_EVERY s) before each answer
        self.trickled = threading.Event()  # set once an answer's trickled headers were all sent
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                issuer.requests.append(self.path)
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks"}
                elif self.path == "/jwks":
                    body = {"keys": [issuer.published(kid, k) for kid, k in list(issuer.keys.items())]}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                if issuer.trickle:
                    self.trickle(data, issuer.trickle)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def trickle(self, data: bytes, lines: int) -> None:
                """The answer, its status line first, then ``lines`` header lines one by one, then the rest."""
                try:
                    self.wfile.write(f"{self.protocol_version} 200 OK\r\n".encode())
                    for i in range(lines):
                        self.wfile.flush()
                        time.sleep(Issuer.TRICKLE_EVERY)
                        self.wfile.write(f"X-Slow-{i}: yes\r\n".encode())
                    issuer.trickled.set()
                    self.wfile.write(f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
                                     + data)
                except OSError:
                    pass  # the caller gave up

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)  # stops at once
        self.kid = self.rotate()

    TRICKLE_EVERY = 0.02

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "Issuer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def rotate(self, *, drop_old: bool = False, ec_key: bool = False, kind: str = "rsa") -> str:
        """Publishes a new signing key of ``kind`` (of :data:`KINDS`; ``ec_key``: "ec") and by default keeps the
        old ones; returns its kid."""
        kid = uuid.uuid4().hex[:12]
        key = KINDS["ec" if ec_key else kind]()
        if drop_old:
            self.keys.clear()
        self.keys[kid] = key
        self.kid = kid
        return kid

    def published(self, kid: str, key: Any) -> dict[str, Any]:
        jwk = self.public_jwk(kid, key)
        if not self.publish_alg:
            del jwk["alg"]
        return jwk

    @staticmethod
    def public_jwk(kid: str, key: Any) -> dict[str, Any]:
        alg = algorithm_of(key)
        algo = {"ES": jwt.algorithms.ECAlgorithm, "Ed": jwt.algorithms.OKPAlgorithm}.get(alg[:2],
                                                                                       jwt.algorithms.RSAAlgorithm)
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
            alg = algorithm_of(key)
        return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})
