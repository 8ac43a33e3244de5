#!/usr/bin/env python3
"""A TCP proxy on 127.0.0.1 that a test can cut, as a database restart or a
network outage cuts a client's connections.

    cut_proxy.py TARGET_HOST TARGET_PORT

It listens on a free loopback port and prints that port on stdout (one line).
SIGUSR1 cuts: every proxied connection is closed at once and the listening
socket too, so new connections are refused (as a stopped server refuses them).
SIGUSR2 listens again on the same port. SIGTERM ends it. Stdlib only.
"""
import os
import signal
import socket
import sys
import threading

target = (sys.argv[1], int(sys.argv[2]))
lock = threading.Lock()
open_sockets = set()
listener = None
port = 0
down = threading.Event()


def listen():
    global listener, port
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    port = sock.getsockname()[1]
    listener = sock
    threading.Thread(target=accept_loop, args=(sock,), daemon=True).start()


def pump(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    for sock in (source, sink):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def accept_loop(sock):
    while True:
        try:
            client, _ = sock.accept()
        except OSError:
            return
        if down.is_set():
            client.close()
            continue
        try:
            upstream = socket.create_connection(target)
        except OSError:
            client.close()
            continue
        with lock:
            open_sockets.update((client, upstream))
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


def cut(*_):
    down.set()
    with lock:
        sockets = list(open_sockets)
        open_sockets.clear()
        if listener is not None:
            sockets.append(listener)
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()


def restore(*_):
    down.clear()
    listen()


signal.signal(signal.SIGUSR1, cut)
signal.signal(signal.SIGUSR2, restore)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
listen()
print(port, flush=True)
while True:
    signal.pause()
