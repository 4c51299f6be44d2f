import torch
# Graph[rank=0](fw, gid=0)
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[8]"):
        clone: "f32[8]" = torch.ops.aten.clone.default(arg0_1)
        auto_functionalized_v2 = torch.ops.higher_order.auto_functionalized_v2(torch.ops.tg.inplace_log_tensor.default, s = 'w', _t_base_index = 0, _all_bases = [clone]);  clone = None
        getitem_1: "f32[8]" = auto_functionalized_v2[1];  auto_functionalized_v2 = None
        mul: "f32[8]" = torch.ops.aten.mul.Tensor(getitem_1, 2)
        return (mul,)
