"""The bridge inside a sandbox: listens on the sandbox's own loopback (``127.0.0.1:PORT``) and forwards each
connection to the worker's proxy socket mounted in the sandbox — the only way out of its empty network
namespace (Claude Code's sandbox runs socat for this; the sandbox's system has Python).

Its source is run by the sandbox's ``python3 -I -S -c SOURCE PORT SOCKET`` before the command (nothing
here is imported by the worker): it binds and listens, then forks; the parent returns at once, so the
command starts with the port ready, and the child serves until the sandbox ends (its PID namespace dies
with the command's shell, taking the bridge with it). Standard library only, and the syntax of every
Python 3 a system is likely to ship.
"""

import os
import socket
import sys

BUFFER_BYTES = 65536


def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    # IPPROTO_TCP, not 0: asyncio then sets TCP_NODELAY on what it accepts, and a relayed reply is not held
    # back by Nagle until the command's delayed ACK (40 ms a round trip).
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    if os.fork():
        os._exit(0)  # ready: the command may connect from now on
    null = os.open(os.devnull, os.O_RDWR)
    for descriptor in (0, 1, 2):  # hold none of the command's pipes open
        os.dup2(null, descriptor)
    os.close(null)
    import asyncio

    async def relay(reader: "asyncio.StreamReader", writer: "asyncio.StreamWriter") -> None:
        try:
            while True:
                data = await reader.read(BUFFER_BYTES)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            pass

    async def forward(reader: "asyncio.StreamReader", writer: "asyncio.StreamWriter") -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(relay(reader, upstream_writer), relay(upstream_reader, writer))
        writer.close()
        upstream_writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(forward, sock=listener)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
