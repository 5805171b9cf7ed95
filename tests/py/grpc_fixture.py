"""gRPC health servers and the reference client for probed's gRPC tests (grpcio, the
reference implementation, with grpcio-health-checking's standard health service).

serve DIR ADDR PORT: runs its servers until killed, on PORT and the four ports after it:
  PORT     the health service, cleartext: "" and "shop.Cart" SERVING, "shop.Down"
           NOT_SERVING, and "shop.Flip" as DIR/flip says (SERVING or NOT_SERVING, re-read
           every 100 ms);
  PORT+1   the same service over TLS (DIR/server.crt and DIR/server.key);
  PORT+2   a gRPC server without the health service (every check is UNIMPLEMENTED);
  PORT+3   a health service that answers after 3 s (past any test's deadline);
  PORT+4   the health service over TLS, requiring a client certificate from DIR/ca.pem.
Writes DIR/ready once every port listens.

check ADDR:PORT SERVICE TIMEOUT [CA SERVER_NAME [CERT KEY]]: asks once, as grpc_health_probe does, and
prints the health status (SERVING, NOT_SERVING, ...) or the gRPC status code's name
(UNIMPLEMENTED, NOT_FOUND, DEADLINE_EXCEEDED, UNAVAILABLE, ...).
"""
import os
import sys
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Slow(health_pb2_grpc.HealthServicer):
    def Check(self, request, context):
        time.sleep(3)
        return health_pb2.HealthCheckResponse(status=SERVING)


def server():
    return grpc.server(futures.ThreadPoolExecutor(max_workers=4))


def serve(directory, addr, port):
    servicer = health.HealthServicer()
    servicer.set("", SERVING)
    servicer.set("shop.Cart", SERVING)
    servicer.set("shop.Down", NOT_SERVING)
    servicer.set("shop.Flip", SERVING)
    host = f"[{addr}]" if ":" in addr else addr
    main = server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, main)
    main.add_insecure_port(f"{host}:{port}")
    with open(os.path.join(directory, "server.key"), "rb") as k, open(
        os.path.join(directory, "server.crt"), "rb"
    ) as c:
        creds = grpc.ssl_server_credentials([(k.read(), c.read())])
    main.add_secure_port(f"{host}:{port + 1}", creds)
    with open(os.path.join(directory, "server.key"), "rb") as k, open(
        os.path.join(directory, "server.crt"), "rb"
    ) as c, open(os.path.join(directory, "ca.pem"), "rb") as ca:
        mtls = grpc.ssl_server_credentials(
            [(k.read(), c.read())], root_certificates=ca.read(), require_client_auth=True
        )
    main.add_secure_port(f"{host}:{port + 4}", mtls)
    bare = server()
    bare.add_insecure_port(f"{host}:{port + 2}")
    slow = server()
    health_pb2_grpc.add_HealthServicer_to_server(Slow(), slow)
    slow.add_insecure_port(f"{host}:{port + 3}")
    for s in (main, bare, slow):
        s.start()
    open(os.path.join(directory, "ready"), "w").close()
    flip = os.path.join(directory, "flip")
    while True:
        try:
            with open(flip) as f:
                word = f.read().strip()
            servicer.set("shop.Flip", SERVING if word == "SERVING" else NOT_SERVING)
        except FileNotFoundError:
            pass
        time.sleep(0.1)


def check(target, service, timeout, ca=None, server_name=None, cert=None, key=None):
    if ca:
        pair = {}
        if cert:
            with open(cert, "rb") as c, open(key, "rb") as k:
                pair = {"certificate_chain": c.read(), "private_key": k.read()}
        with open(ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read(), **pair)
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        channel = grpc.secure_channel(target, creds, options=options)
    else:
        channel = grpc.insecure_channel(target)
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=float(timeout))
        print(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
    except grpc.RpcError as e:
        print(e.code().name)
    finally:
        channel.close()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        check(*sys.argv[2:])
