import torch
# Graph[rank=0](fw, gid=0)
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[4, 8]", arg1_1: "f32[12, 8]", arg2_1: "f32[12]", arg3_1: "f32[8, 4]"):
        t: "f32[8, 12]" = torch.ops.aten.t.default(arg1_1)
        addmm: "f32[4, 12]" = torch.ops.aten.addmm.default(arg2_1, arg0_1, t)
        split_with_sizes = torch.ops.aten.split_with_sizes.default(addmm, [4, 4, 4], -1)
        getitem: "f32[4, 4]" = split_with_sizes[0]
        getitem_1: "f32[4, 4]" = split_with_sizes[1]
        getitem_2: "f32[4, 4]" = split_with_sizes[2]
        mul: "f32[4, 4]" = torch.ops.aten.mul.Tensor(getitem, getitem_1)
        add: "f32[4, 4]" = torch.ops.aten.add.Tensor(mul, getitem_2)
        t_1: "f32[4, 8]" = torch.ops.aten.t.default(arg3_1)
        mm: "f32[4, 8]" = torch.ops.aten.mm.default(add, t_1)
        return (mm,)
