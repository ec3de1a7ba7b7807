"""TLS directly: a self-signed pair, a real TLS handshake, the Secure __Host- cookie and HSTS."""

from __future__ import annotations

import ssl
import stat

import aiohttp
import pytest

from server.gateway.auth import AuthConfig
from server.gateway.auth.tls import make_self_signed, ssl_context


def test_self_signed_pair_is_made_on_request(tmp_path) -> None:
    cert, key = tmp_path / "tls" / "cert.pem", tmp_path / "tls" / "key.pem"
    cfg = AuthConfig.from_table({"tls_cert": str(cert), "tls_key": str(key), "tls_self_signed": True})
    ctx = ssl_context(cfg, hosts=["robot.lan", "192.168.1.20"])
    assert isinstance(ctx, ssl.SSLContext) and ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    from cryptography import x509
    names = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert {"robot.lan", "localhost"} <= set(names.get_values_for_type(x509.DNSName))
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} >= {"192.168.1.20", "127.0.0.1", "::1"}
    before = cert.read_bytes()
    ssl_context(cfg)  # exists: not made again
    assert cert.read_bytes() == before


def test_tls_off_and_bad_files(tmp_path) -> None:
    assert ssl_context(AuthConfig()) is None
    cfg = AuthConfig.from_table({"tls_cert": str(tmp_path / "no.pem"), "tls_key": str(tmp_path / "no.key")})
    with pytest.raises(ValueError, match="tls_cert"):
        ssl_context(cfg)
    with pytest.raises(ValueError, match="together"):
        AuthConfig.from_table({"tls_cert": "x.pem"})


async def test_login_over_tls_sets_a_secure_host_cookie_and_hsts(start_gateway, users_file, tmp_path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    make_self_signed(cert, key)
    cfg = AuthConfig.from_table({"tls_cert": str(cert), "tls_key": str(key)})
    gw = await start_gateway(users_file, ssl=ssl_context(cfg), tls_cert=str(cert), tls_key=str(key))
    client_ctx = ssl.create_default_context(cafile=str(cert))  # verifies the server against the pair
    origin = f"https://127.0.0.1:{gw.server.port}"
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        async with http.post(f"{origin}/api/auth/login", json={"username": "vera", "password":
                             "correct horse battery"}, headers={"Origin": origin}, ssl=client_ctx) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["Strict-Transport-Security"].startswith("max-age=")
            set_cookie = resp.headers["Set-Cookie"]
            assert set_cookie.startswith("__Host-teleop_session=")
            for attr in ("Secure", "HttpOnly", "SameSite=Strict", "Path=/"):
                assert attr in set_cookie, set_cookie
            token = resp.cookies["__Host-teleop_session"].value
        async with http.get(f"{origin}/api/auth/me", headers={"Cookie": f"__Host-teleop_session={token}"},
                            ssl=client_ctx) as resp:
            assert resp.status == 200 and (await resp.json())["user"] == "vera"


async def test_behind_a_tls_terminating_proxy(start_gateway, users_file) -> None:
    """What docs/deploy.md's Caddy and nginx examples send: Host, X-Forwarded-For and -Proto."""
    gw = await start_gateway(users_file, trusted_proxies=["127.0.0.1"], allowed_hosts=["robot.example.org"])
    proxy = {"Host": "robot.example.org", "X-Forwarded-For": "198.51.100.7", "X-Forwarded-Proto": "https"}
    status, body, resp = await gw.request("POST", "/api/auth/login", origin="https://robot.example.org",
                                          headers=proxy, json_body={"username": "olga",
                                                                    "password": "correct horse battery"})
    assert status == 200, body
    assert "Secure" in resp.headers["Set-Cookie"] and resp.headers["Set-Cookie"].startswith("__Host-")
    assert resp.headers["Strict-Transport-Security"].startswith("max-age=")
    cookie = {"Cookie": f"__Host-teleop_session={resp.cookies['__Host-teleop_session'].value}",
              "X-CSRF-Token": body["csrf_token"]}
    status, body, _ = await gw.request("POST", "/api/lease/take", origin="https://robot.example.org",
                                       headers={**proxy, **cookie}, json_body={})
    assert status == 200, body
    status, me, _ = await gw.request("GET", "/api/auth/me", headers={**proxy, **cookie})
    assert me["remote"] == "198.51.100.7" and me["external"] is True
    # the same request claiming https but not from a trusted proxy is plain http: the Origin does not match
    untrusted = await start_gateway(users_file, allowed_hosts=["robot.example.org"])
    status, body, _ = await untrusted.request("POST", "/api/auth/login", origin="https://robot.example.org",
                                              headers=proxy, json_body={"username": "olga",
                                                                        "password": "correct horse battery"})
    assert status == 403 and body["error"]["code"] == "bad_origin"
