#!/usr/bin/env python3
"""A paced stand-in for a completions server, to calibrate bench/serve_load.py.

  bench/paced_stream_server.py PORT [TICK_S]

Every TICK_S seconds (default 0.003, about a 64-row decode step) each open
streaming request gets one token chunk in cohort's shape (chunked transfer
encoding, `data: {...}` with text and token_ids), then after max_tokens a
usage chunk and `[DONE]`. It prints the tokens it has sent and their rate
over the time streams were open, so a load's output tok/s can be read
against what the server actually sent (standard library only).
"""
import asyncio
import json
import sys

PORT = int(sys.argv[1])
TICK = float(sys.argv[2]) if len(sys.argv) > 2 else 0.003


def chunk(data):
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(obj):
    return chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


TOKEN = event({"id": "cmpl-0", "object": "text_completion", "created": 0, "model": "m",
               "choices": [{"index": 0, "text": "hello", "token_ids": [1234], "logprobs": None,
                            "finish_reason": None}]})
DONE = chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
streams = []  # [transport, tokens left, tokens asked]
sent = {"tokens": 0, "first": None, "last": None}


class Request(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data):
        self.buffer += data
        if b"\r\n\r\n" not in self.buffer:
            return
        head, body = self.buffer.split(b"\r\n\r\n", 1)
        lengths = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        length = int(lengths[0].split(b":")[1]) if lengths else 0
        if len(body) < length:
            return
        if head.startswith(b"GET"):
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 27\r\nConnection: close\r\n\r\n"
                                 b'{"data": [{"id": "paced"}]}')
            self.transport.close()
            return
        asked = int(json.loads(body[:length]).get("max_tokens", 16))
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
        streams.append([self.transport, asked, asked])


async def ticker():
    loop = asyncio.get_running_loop()
    due = loop.time()
    while True:
        if streams:
            now = loop.time()
            sent["first"] = sent["first"] or now
            sent["last"] = now
            before = sent["tokens"]
            sent["tokens"] += len(streams)
            if before // 10000 != sent["tokens"] // 10000:
                rate = sent["tokens"] / max(1e-9, now - sent["first"])
                print(f"paced_stream_server: {sent['tokens']} tokens sent, {rate:.0f} tok/s", flush=True)
        for stream in list(streams):
            transport = stream[0]
            transport.write(TOKEN)
            stream[1] -= 1
            if stream[1] == 0:
                transport.write(event({"choices": [], "usage": {"completion_tokens": stream[2]}}) + DONE)
                transport.close()
                streams.remove(stream)
        due += TICK
        await asyncio.sleep(max(0.0, due - loop.time()))


async def main():
    server = await asyncio.get_running_loop().create_server(Request, "127.0.0.1", PORT)
    asyncio.create_task(ticker())
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
