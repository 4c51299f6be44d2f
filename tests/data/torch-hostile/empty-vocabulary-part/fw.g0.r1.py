import torch
# Graph[rank=1](fw, gid=0)
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[0, 4]", arg1_1: "i64[8]"):
        lt: "b8[8]" = torch.ops.aten.lt.Scalar(arg1_1, 5)
        ge: "b8[8]" = torch.ops.aten.ge.Scalar(arg1_1, 5)
        bitwise_or: "b8[8]" = torch.ops.aten.bitwise_or.Tensor(lt, ge)
        sub: "i64[8]" = torch.ops.aten.sub.Tensor(arg1_1, 5)
        _tensor_constant0 = self._tensor_constant0
        index_put: "i64[8]" = torch.ops.aten.index_put.default(sub, [bitwise_or], _tensor_constant0)
        index: "f32[8, 4]" = torch.ops.aten.index.Tensor(arg0_1, [index_put])
        _tensor_constant1 = self._tensor_constant1
        index_put_1: "f32[8, 4]" = torch.ops.aten.index_put.default(index, [bitwise_or], _tensor_constant1)
        return (index_put_1,)
