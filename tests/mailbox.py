"""A real SMTP server (aiosmtpd) on 127.0.0.1 that keeps what it receives."""

from __future__ import annotations

import socket
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller


class _Keep:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        return "250 Message accepted for delivery"


class Mailbox:
    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self._handler = _Keep()
        self._controller = Controller(self._handler, hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> Mailbox:
        self._controller.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._controller.stop()

    @property
    def messages(self) -> list[Message]:
        return self._handler.messages

    def to(self, address: str) -> list[Message]:
        return [m for m in self.messages if m["To"] == address]

    @staticmethod
    def body(message: Message) -> str:
        payload = message.get_payload(decode=True)
        assert isinstance(payload, bytes)
        return payload.decode()
