import torch
# Graph[rank=0](fw, gid=0)
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[8]", arg1_1: "b8[8]"):
        clone: "f32[8]" = torch.ops.aten.clone.default(arg0_1)
        masked_fill_: "f32[8]" = torch.ops.aten.masked_fill_.Scalar(clone, arg1_1, 0.0)
        mul: "f32[8]" = torch.ops.aten.mul.Tensor(clone, 2)
        return (mul,)
