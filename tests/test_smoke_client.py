from conftest import auth, record


def test_client_lists_builds(env):
    env.load([record(1), record(2)])
    secret = env.token()
    with env.client() as client:
        response = client.get("/builds", headers=auth(secret))
    assert response.status_code == 200
    assert [b["build_id"] for b in response.json()] == [2, 1]
