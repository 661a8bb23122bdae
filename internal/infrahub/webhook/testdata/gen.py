# Generates signatures the way Infrahub's StandardWebhook does (json.dumps of the payload, with
# default or compact separators by version; early versions: str() of the dict), and the body as httpx sends it (compact, raw UTF-8).
import base64, hashlib, hmac, json
key = "shh-a-shared-key"
cases = [
 {"data": {"node_id": "18a1c2d4-0000-4000-8000-000000000001", "artifact_definition_id": "18a1c2d4-0000-4000-8000-0000000000d1",
   "target_id": "t1", "target_kind": "InfraDevice", "checksum": "abc", "checksum_previous": None,
   "storage_id": "s1", "storage_id_previous": None}, "id": "e1", "branch": "main", "account_id": "acc", "occured_at": "2026-12-07T05:00:00.123456+00:00", "event": "infrahub.artifact.updated"},
 {"data": {"name": "Zürich – café \u2603 \U0001F600", "q": "it's \"quoted\" \\ back", "ctl": "a\nb\tc\r\x01\x7f\x1f", "slash": "</script>&"}, "id": "e2", "branch": None, "account_id": None, "occured_at": "x", "event": "infrahub.node.updated"},
 {"data": {"n": 1, "neg": -42, "f": 1.5, "big": 1e16, "small": 1e-05, "one": 1.0, "mil": 1000000.0, "t": True, "fl": False, "l": [1, "a", None, [], {}], "e": {}}, "id": "e3", "branch": "feature/x", "account_id": "", "occured_at": "y", "event": "infrahub.artifact.created"},
]
out = []
for i, p in enumerate(cases):
    mid = "msg_%032x" % (i + 1)
    ts = str(1796619600 + i)
    body = json.dumps(p, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for scheme, signed in (("json", json.dumps(p)), ("compact", json.dumps(p, separators=(",", ":"))), ("repr", str(p))):
        sig = hmac.new(key.encode(), f"{mid}.{ts}.{signed}".encode(), hashlib.sha256).digest()
        out.append({"scheme": scheme, "id": mid, "timestamp": ts, "body": body, "signed": signed,
                    "signature": "v1," + base64.b64encode(sig).decode()})
print(json.dumps({"key": key, "vectors": out}, indent=1, ensure_ascii=False))
