import torch
# Graph[rank=0](fw, gid=0)
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[]"):
        ag: "f32[2]" = torch.ops._c10d_functional.all_gather_into_tensor.default(arg0_1, 2, "tp")
        w: "f32[2]" = torch.ops._c10d_functional.wait_tensor.default(ag)
        s: "f32[]" = torch.ops.aten.sum.default(w)
        return (s,)
