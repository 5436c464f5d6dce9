"""Reads TensorBoard event files with Google's protobuf runtime, not dtrain's code.

usage: python3 tfevents_reader.py FILE...  -> JSON on stdout, exit 1 with a message on
stderr at the first bad record.

For every record it checks the TFRecord framing (u64 little-endian length, masked
CRC32C of those 8 bytes, data, masked CRC32C of the data) with a CRC32C written here
from its definition, then parses the data as a tensorboard.Event whose descriptors are
built from the field numbers of the published protos (tensorboard/compat/proto/
event.proto, summary.proto, tensor.proto, tensor_shape.proto, types.proto, identical to
tensorflow/core/util/event.proto and tensorflow/core/framework/*.proto), and requires
that the message re-serialises to the very same bytes once unknown fields are dropped:
no field of a wrong number or wire type, nothing left over, canonical encoding.
"""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
OPTIONAL, REPEATED = F.LABEL_OPTIONAL, F.LABEL_REPEATED


def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# The check value of CRC-32C (RFC 3720 appendix B.4 lists more vectors).
assert crc32c(b"123456789") == 0xE3069283
assert crc32c(bytes(32)) == 0x8A9136AA


def field(msg, name, number, ftype, label=OPTIONAL, type_name=None, oneof=None):
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name
    if oneof is not None:
        f.oneof_index = oneof
    return f


def build_event_class():
    fd = descriptor_pb2.FileDescriptorProto(
        name="dtrain_check/tensorboard_event.proto", package="tensorboard", syntax="proto3"
    )
    # types.proto: enum DataType (only the values this check needs).
    dt = fd.enum_type.add(name="DataType")
    dt.value.add(name="DT_INVALID", number=0)
    dt.value.add(name="DT_FLOAT", number=1)
    dt.value.add(name="DT_DOUBLE", number=2)
    dt.value.add(name="DT_STRING", number=7)
    # summary.proto: enum DataClass.
    dc = fd.enum_type.add(name="DataClass")
    for name, number in [
        ("DATA_CLASS_UNKNOWN", 0),
        ("DATA_CLASS_SCALAR", 1),
        ("DATA_CLASS_TENSOR", 2),
        ("DATA_CLASS_BLOB_SEQUENCE", 3),
    ]:
        dc.value.add(name=name, number=number)

    # tensor_shape.proto
    shape = fd.message_type.add(name="TensorShapeProto")
    dim = shape.nested_type.add(name="Dim")
    field(dim, "size", 1, F.TYPE_INT64)
    field(dim, "name", 2, F.TYPE_STRING)
    field(shape, "dim", 2, F.TYPE_MESSAGE, REPEATED, ".tensorboard.TensorShapeProto.Dim")
    field(shape, "unknown_rank", 3, F.TYPE_BOOL)

    # tensor.proto (the fields of the types above)
    tensor = fd.message_type.add(name="TensorProto")
    field(tensor, "dtype", 1, F.TYPE_ENUM, type_name=".tensorboard.DataType")
    field(tensor, "tensor_shape", 2, F.TYPE_MESSAGE, type_name=".tensorboard.TensorShapeProto")
    field(tensor, "version_number", 3, F.TYPE_INT32)
    field(tensor, "tensor_content", 4, F.TYPE_BYTES)
    field(tensor, "float_val", 5, F.TYPE_FLOAT, REPEATED)
    field(tensor, "double_val", 6, F.TYPE_DOUBLE, REPEATED)
    field(tensor, "string_val", 8, F.TYPE_BYTES, REPEATED)

    # summary.proto
    meta = fd.message_type.add(name="SummaryMetadata")
    plugin = meta.nested_type.add(name="PluginData")
    field(plugin, "plugin_name", 1, F.TYPE_STRING)
    field(plugin, "content", 2, F.TYPE_BYTES)
    field(meta, "plugin_data", 1, F.TYPE_MESSAGE, type_name=".tensorboard.SummaryMetadata.PluginData")
    field(meta, "display_name", 2, F.TYPE_STRING)
    field(meta, "summary_description", 3, F.TYPE_STRING)
    field(meta, "data_class", 4, F.TYPE_ENUM, type_name=".tensorboard.DataClass")

    summary = fd.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    field(value, "node_name", 7, F.TYPE_STRING)
    field(value, "tag", 1, F.TYPE_STRING)
    field(value, "metadata", 9, F.TYPE_MESSAGE, type_name=".tensorboard.SummaryMetadata")
    field(value, "simple_value", 2, F.TYPE_FLOAT, oneof=0)
    field(value, "obsolete_old_style_histogram", 3, F.TYPE_BYTES, oneof=0)
    field(value, "tensor", 8, F.TYPE_MESSAGE, type_name=".tensorboard.TensorProto", oneof=0)
    field(summary, "value", 1, F.TYPE_MESSAGE, REPEATED, ".tensorboard.Summary.Value")

    # event.proto
    session = fd.message_type.add(name="SessionLog")
    status = session.enum_type.add(name="SessionStatus")
    for name, number in [("STATUS_UNSPECIFIED", 0), ("START", 1), ("STOP", 2), ("CHECKPOINT", 3)]:
        status.value.add(name=name, number=number)
    field(session, "status", 1, F.TYPE_ENUM, type_name=".tensorboard.SessionLog.SessionStatus")
    field(session, "checkpoint_path", 2, F.TYPE_STRING)
    field(session, "msg", 3, F.TYPE_STRING)

    event = fd.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    field(event, "wall_time", 1, F.TYPE_DOUBLE)
    field(event, "step", 2, F.TYPE_INT64)
    field(event, "file_version", 3, F.TYPE_STRING, oneof=0)
    field(event, "graph_def", 4, F.TYPE_BYTES, oneof=0)
    field(event, "summary", 5, F.TYPE_MESSAGE, type_name=".tensorboard.Summary", oneof=0)
    field(event, "session_log", 7, F.TYPE_MESSAGE, type_name=".tensorboard.SessionLog", oneof=0)
    field(event, "meta_graph_def", 9, F.TYPE_BYTES, oneof=0)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("tensorboard.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


Event = build_event_class()


def f32_bits(x):
    return struct.pack("<f", x).hex()


def value_json(v):
    out = {"tag": v.tag, "kind": v.WhichOneof("value")}
    if out["kind"] == "simple_value":
        out["f32"] = f32_bits(v.simple_value)
    elif out["kind"] == "tensor":
        t = v.tensor
        out["dtype"] = t.dtype
        out["shape"] = [d.size for d in t.tensor_shape.dim]
        out["has_shape"] = t.HasField("tensor_shape")
        out["strings"] = [s.decode("utf-8") for s in t.string_val]
    if v.HasField("metadata"):
        out["plugin"] = v.metadata.plugin_data.plugin_name
        out["plugin_content"] = v.metadata.plugin_data.content.hex()
        out["data_class"] = v.metadata.data_class
    return out


def event_json(e):
    out = {"wall_time": e.wall_time, "step": str(e.step), "what": e.WhichOneof("what")}
    if out["what"] == "file_version":
        out["file_version"] = e.file_version
    elif out["what"] == "summary":
        out["values"] = [value_json(v) for v in e.summary.value]
    elif out["what"] == "session_log":
        out["status"] = e.session_log.status
    return out


def read(path):
    data = open(path, "rb").read()
    at, events = 0, []
    while at < len(data):
        where = f"{path}: record {len(events)} at byte {at}"
        if len(data) - at < 12:
            sys.exit(f"{where}: {len(data) - at} bytes left, a record header needs 12")
        header = data[at : at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8 : at + 12])
        if length_crc != masked(crc32c(header)):
            sys.exit(f"{where}: masked CRC32C of the length is {length_crc:#x}, expected {masked(crc32c(header)):#x}")
        end = at + 12 + length
        if end + 4 > len(data):
            sys.exit(f"{where}: length {length} runs past the end of the file ({len(data)} bytes)")
        payload = data[at + 12 : end]
        (data_crc,) = struct.unpack("<I", data[end : end + 4])
        if data_crc != masked(crc32c(payload)):
            sys.exit(f"{where}: masked CRC32C of the data is {data_crc:#x}, expected {masked(crc32c(payload)):#x}")
        e = Event()
        e.ParseFromString(payload)
        e.DiscardUnknownFields()
        again = e.SerializeToString(deterministic=True)
        if again != payload:
            sys.exit(f"{where}: the Event does not re-serialise to its bytes:\n  file {payload.hex()}\n  protobuf {again.hex()}")
        events.append(event_json(e))
        at = end + 4
    return events


if __name__ == "__main__":
    print(json.dumps({p: read(p) for p in sys.argv[1:]}))
