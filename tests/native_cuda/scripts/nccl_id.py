"""The unique id of a communicator for the ctypes peers: ID_HEX (the bytes themselves, every rank given them), or
@FILE: rank 0 makes it with ncclGetUniqueId and writes it to FILE, the others read it there, as torch hands it
out through its store (with the socket transport the id carries rank 0's bootstrap root)."""

import ctypes
import os
import time


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def unique_id(nccl: ctypes.CDLL, rank: int, arg: str) -> UniqueId:
    if not arg.startswith("@"):
        return UniqueId.from_buffer_copy(bytes.fromhex(arg))  # UniqueId(raw) would stop at a NUL byte
    path = arg[1:]
    if rank == 0:
        made = UniqueId()
        assert nccl.ncclGetUniqueId(ctypes.byref(made)) == 0
        with open(path + ".tmp", "w") as f:
            f.write(ctypes.string_at(ctypes.addressof(made), 128).hex())  # .internal too stops at a NUL
        os.rename(path + ".tmp", path)
    while not os.path.exists(path):
        time.sleep(0.01)
    with open(path) as f:
        return UniqueId.from_buffer_copy(bytes.fromhex(f.read()))
