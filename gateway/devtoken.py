"""`python -m adk_gateway.devtoken`: mint an HS256 test token for `--auth jwt --auth-jwt-secret`.

For development and tests only: production tokens come from your identity provider.

    python -m adk_gateway.devtoken --secret dev-secret --sub alice [--ttl 3600] [--audience A] [--issuer I]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

import jwt

__all__ = ["main", "mint"]


def mint(secret: str, sub: str, *, ttl_s: int = 3600, audience: str = "", issuer: str = "") -> str:
    """An HS256 JWT for `sub`, valid for `ttl_s` seconds from now."""
    now = int(time.time())
    claims: dict[str, object] = {"sub": sub, "iat": now, "exp": now + ttl_s}
    if audience:
        claims["aud"] = audience
    if issuer:
        claims["iss"] = issuer
    return jwt.encode(claims, secret, algorithm="HS256")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adk_gateway.devtoken", description=__doc__.splitlines()[0])
    parser.add_argument("--secret", default=os.environ.get("ADK_GATEWAY_AUTH_JWT_SECRET", ""),
                        help="the gateway's --auth-jwt-secret [env ADK_GATEWAY_AUTH_JWT_SECRET]")
    parser.add_argument("--sub", required=True, help="the user id")
    parser.add_argument("--ttl", type=int, default=3600, help="seconds until it expires (default 3600)")
    parser.add_argument("--audience", default=os.environ.get("ADK_GATEWAY_AUTH_JWT_AUDIENCE", ""))
    parser.add_argument("--issuer", default=os.environ.get("ADK_GATEWAY_AUTH_JWT_ISSUER", ""))
    args = parser.parse_args(argv)
    if not args.secret:
        parser.error("--secret (or ADK_GATEWAY_AUTH_JWT_SECRET) is required")
    print(mint(args.secret, args.sub, ttl_s=args.ttl, audience=args.audience, issuer=args.issuer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
