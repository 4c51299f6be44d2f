import torch
# Graph[rank=0](fw, gid=0)
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[2, 8]", arg1_1: "f32[2, 8]", arg2_1: "f32[2, 8]", arg3_1: "f32[2, 8]"):
        mul: "f32[2, 8]" = torch.ops.aten.mul.Tensor(arg3_1, arg2_1)
        mul_1: "f32[2, 8]" = torch.ops.aten.mul.Tensor(arg1_1, arg0_1)
        add: "f32[2, 8]" = torch.ops.aten.add.Tensor(mul_1, mul)
        return (add,)
