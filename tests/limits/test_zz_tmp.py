import time
from tests.conftest import start_api
def test_start(services, api):
    for env in ({}, {"WDS_INPROCESS_WORKER": "false"}):
        t=time.monotonic(); p=start_api(services, name="x", **env); print(env, time.monotonic()-t); 
        t=time.monotonic(); p.stop(); print("stop", time.monotonic()-t)
