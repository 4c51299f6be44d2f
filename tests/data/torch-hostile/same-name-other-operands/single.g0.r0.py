import torch
# Graph[rank=0](fw, gid=0)
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[4, 8]", arg1_1: "f32[4, 8]", arg2_1: "f32[4, 8]", arg3_1: "f32[4, 8]"):
        mul: "f32[4, 8]" = torch.ops.aten.mul.Tensor(arg0_1, arg1_1)
        mul_1: "f32[4, 8]" = torch.ops.aten.mul.Tensor(arg2_1, arg3_1)
        add: "f32[4, 8]" = torch.ops.aten.add.Tensor(mul, mul_1)
        return (add,)
