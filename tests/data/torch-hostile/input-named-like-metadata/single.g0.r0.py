import torch
# Graph[rank=0](fw, gid=0)
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[4, 2, 8]", arg1_1: "f32[4, 2, 8]", arg2_1: "f32[4, 2, 8]", attention_metadata_4: "f32[4, 4]"):
        empty_like: "f32[4, 2, 8]" = torch.ops.aten.empty_like.default(arg0_1, pin_memory = False)
        auto_functionalized = torch.ops.higher_order.auto_functionalized(torch.ops.vllm.unified_attention_with_output.default, query = arg0_1, key = arg1_1, value = arg2_1, output = empty_like, layer_name = 'model.layers.0.self_attn.attn')
        getitem_1: "f32[4, 2, 8]" = auto_functionalized[1]
        view: "f32[4, 16]" = torch.ops.aten.view.default(getitem_1, [4, 16])
        mm: "f32[4, 16]" = torch.ops.aten.mm.default(attention_metadata_4, view)
        return (mm,)
