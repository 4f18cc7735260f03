"""The documented parameters: what the OpenAPI document says of parameters that handlers read themselves."""

from __future__ import annotations

from buildreport.http.parameters import BUILD_ID


def test_a_paths_build_id_is_documented_as_a_bounded_integer_before_the_query(env):
    with env.client() as client:
        paths = client.get("/docs/openapi.json").json()["paths"]
    for path in ("/builds/{build_id}", "/builds/{build_id}/url"):
        first, *others = paths[path]["get"]["parameters"]
        assert first["name"] == "build_id" and first["in"] == "path" and first["required"] is True, path
        assert first["schema"]["type"] == "integer", path
        assert (first["schema"]["minimum"], first["schema"]["maximum"]) == (1, 2**63 - 1), path
        assert first["description"] == BUILD_ID.description, path
        assert "build_id" not in [other["name"] for other in others], path
    assert [p["name"] for p in paths["/builds/{build_id}/url"]["get"]["parameters"]][1] == "ttl_seconds"


def test_a_build_id_the_path_gives_is_validated_by_the_handler(env):
    secret = env.token()
    with env.client() as client:
        for given in ("0", "01", "-1", "x", str(2**63)):
            answer = client.get(f"/builds/{given}", headers={"Authorization": f"Bearer {secret}"})
            assert answer.status_code == 400, given
            assert answer.json()["invalid_params"][0]["name"] == "build_id", given
