import torch
# Graph[rank=0](fw, gid=0)
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[8]"):
        _to_copy: "b8[8]" = torch.ops.aten._to_copy.default(arg0_1, dtype = torch.bool)
        mul: "f32[8]" = torch.ops.aten.mul.Tensor(arg0_1, _to_copy)
        return (mul,)
