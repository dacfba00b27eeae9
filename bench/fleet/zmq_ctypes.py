"""The few ZeroMQ calls record.py makes, over libzmq through ctypes, for a machine without pyzmq.

pyzmq (Debian's python3-zmq) is what record.py uses wherever it can be installed; this stand-in
exists for the GPU machine, which has Python and banyand's own libzmq (in the bundle's lib/) but
no package registry. It offers the subset record.py needs, with pyzmq's names: Context.instance(),
Context.socket(SUB | DEALER), Socket.setsockopt(SUBSCRIBE, b""), connect, send_multipart,
recv_multipart, and Poller.register / poll(timeout_ms). libzmq is found by ctypes.util, or
through BANYAN_LIBZMQ (a path to libzmq.so.5).
"""

import ctypes
import ctypes.util
import os

SUB = 2
DEALER = 5
SUBSCRIBE = 6
SNDMORE = 2
POLLIN = 1

_lib = ctypes.CDLL(os.environ.get("BANYAN_LIBZMQ") or ctypes.util.find_library("zmq")
                   or "libzmq.so.5", use_errno=True)
_lib.zmq_ctx_new.restype = ctypes.c_void_p
_lib.zmq_socket.restype = ctypes.c_void_p
_lib.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
_lib.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
_lib.zmq_connect.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_lib.zmq_send.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_lib.zmq_msg_init.argtypes = [ctypes.c_void_p]
_lib.zmq_msg_recv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
_lib.zmq_msg_data.restype = ctypes.c_void_p
_lib.zmq_msg_data.argtypes = [ctypes.c_void_p]
_lib.zmq_msg_size.restype = ctypes.c_size_t
_lib.zmq_msg_size.argtypes = [ctypes.c_void_p]
_lib.zmq_msg_more.argtypes = [ctypes.c_void_p]
_lib.zmq_msg_close.argtypes = [ctypes.c_void_p]
_lib.zmq_strerror.restype = ctypes.c_char_p
_lib.zmq_errno.restype = ctypes.c_int


class ZMQError(OSError):
    pass


def _check(rc):
    if rc is None or (isinstance(rc, int) and rc < 0):
        raise ZMQError(_lib.zmq_strerror(_lib.zmq_errno()).decode())
    return rc


class _PollItem(ctypes.Structure):
    _fields_ = [("socket", ctypes.c_void_p), ("fd", ctypes.c_int), ("events", ctypes.c_short),
                ("revents", ctypes.c_short)]


_lib.zmq_poll.argtypes = [ctypes.POINTER(_PollItem), ctypes.c_int, ctypes.c_long]


class Socket:
    def __init__(self, ctx, kind):
        self.handle = _check(_lib.zmq_socket(ctx, kind))

    def setsockopt(self, option, value):
        _check(_lib.zmq_setsockopt(self.handle, option, value, len(value)))

    def connect(self, endpoint):
        _check(_lib.zmq_connect(self.handle, endpoint.encode()))

    def send_multipart(self, frames):
        for i, frame in enumerate(frames):
            flags = SNDMORE if i + 1 < len(frames) else 0
            _check(_lib.zmq_send(self.handle, frame, len(frame), flags))

    def recv_multipart(self):
        frames = []
        msg = ctypes.create_string_buffer(64)  # zmq_msg_t: 64 opaque bytes
        while True:
            _check(_lib.zmq_msg_init(msg))
            try:
                n = _check(_lib.zmq_msg_recv(msg, self.handle, 0))
                frames.append(ctypes.string_at(_lib.zmq_msg_data(msg), n))
                more = _lib.zmq_msg_more(msg)
            finally:
                _lib.zmq_msg_close(msg)
            if not more:
                return frames


class Context:
    _instance = None

    def __init__(self):
        self.handle = _check(_lib.zmq_ctx_new())

    @classmethod
    def instance(cls):
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def socket(self, kind):
        return Socket(self.handle, kind)


class Poller:
    def __init__(self):
        self.sockets = []

    def register(self, socket, events):
        self.sockets.append((socket, events))

    def poll(self, timeout_ms):
        items = (_PollItem * len(self.sockets))(
            *[_PollItem(s.handle, 0, e, 0) for s, e in self.sockets])
        _check(_lib.zmq_poll(items, len(self.sockets), int(timeout_ms)))
        return [(s, it.revents) for (s, _), it in zip(self.sockets, items) if it.revents]
