import torch
# Graph[rank=1](fw, gid=0)
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[8]"):
        t: "f32[8]" = torch.ops.aten.mul.Tensor(arg0_1, 1)
        b: "f32[8]" = torch.ops._c10d_functional.broadcast.default(t, 1, "dp1")
        w: "f32[8]" = torch.ops._c10d_functional.wait_tensor.default(b)
        mul: "f32[8]" = torch.ops.aten.mul.Tensor(w, 2)
        return (mul,)
