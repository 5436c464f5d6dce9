"""Loads a dtrain checkpoint into PyTorch with no dtrain code and no
safetensors package: a .safetensors file is an 8-byte little-endian header
length, a JSON header, then the raw little-endian tensor bytes.

  /usr/bin/python3 scripts/peers/load_dtrain_checkpoint.py CHECKPOINT_DIR
verifies the checkpoint `latest` names and prints each model tensor's dtype,
shape and sum. In your own code (names are PyTorch's, no "module." prefix):

  ckpt = latest_checkpoint("runs/my-run/checkpoints")
  model.load_state_dict(load_safetensors(ckpt / "model.safetensors"))
  state = json.loads((ckpt / "state.json").read_text())  # epoch, step, RNG states, config, ...
"""
import hashlib
import json
import pathlib
import sys

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
          "U8": torch.uint8, "BOOL": torch.bool}


def load_safetensors(path):
    """{name: tensor} from a .safetensors file."""
    raw = pathlib.Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    tensors = {}
    for name, t in header.items():
        begin, end = (8 + n + offset for offset in t["data_offsets"])
        dtype = DTYPES[t["dtype"]]
        flat = torch.frombuffer(bytearray(raw[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(t["shape"])
    return tensors


def latest_checkpoint(root):
    """The checkpoint directory that `<root>/latest` names."""
    root = pathlib.Path(root)
    return root / (root / "latest").read_text().strip()


def verify(ckpt):
    """Checks every file's sha256 against manifest.json."""
    for f in json.loads((pathlib.Path(ckpt) / "manifest.json").read_text())["files"]:
        if hashlib.sha256((pathlib.Path(ckpt) / f["name"]).read_bytes()).hexdigest() != f["sha256"]:
            raise ValueError(f"{ckpt}/{f['name']} does not match its sha256 in manifest.json")


if __name__ == "__main__":
    ckpt = latest_checkpoint(sys.argv[1])
    verify(ckpt)
    print(ckpt)
    for name, t in load_safetensors(ckpt / "model.safetensors").items():
        print(f"  {name}: {t.dtype} {list(t.shape)} sum={t.double().sum().item():.6g}")
