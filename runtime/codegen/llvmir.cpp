#include "metagrad/codegen/llvmir.hpp"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <cmath>
#include <map>
#include <stdexcept>

namespace metagrad::codegen {

using symbolic::Node;
using symbolic::NodeKind;

namespace {

std::string print(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return os.str();
}

struct Renderer {
  const LinearizedKernel& k;
  llvm::LLVMContext& ctx;
  std::unique_ptr<llvm::Module> mod;
  llvm::IRBuilder<> b;
  llvm::Function* fn = nullptr;
  std::vector<llvm::Value*> bufs;
  unsigned range_arg = 0;                    // the argument `start` (`end` follows it)
  std::map<std::string, llvm::Value*> vars;  // loop variables, i64
  std::vector<llvm::Value*> vals;            // per uop: its value, or an accumulator's alloca
  std::vector<bool> is_acc;
  struct Loop {
    llvm::PHINode* i;
    llvm::BasicBlock *header, *exit;
  };
  std::vector<Loop> loops;

  Renderer(const LinearizedKernel& k_, llvm::LLVMContext& c)
      : k(k_), ctx(c), mod(std::make_unique<llvm::Module>(k_.name, c)), b(c) {}
  // No fast-math flags, not even contraction: NaN and inf behave, and two kernels computing the
  // same expression get the same bits (a max's backward compares a recomputed value with the
  // forward's; an FMA in one kernel and not the other makes them differ).

  // ---- types and constants ----
  llvm::Type* storage(DType d) {
    switch (d.priority) {
      case dtypes::bool_.priority:
      case dtypes::int8.priority:
      case dtypes::uint8.priority:
        return b.getInt8Ty();
      case dtypes::int16.priority:
      case dtypes::uint16.priority:
        return b.getInt16Ty();
      case dtypes::int32.priority:
      case dtypes::uint32.priority:
        return b.getInt32Ty();
      case dtypes::int64.priority:
      case dtypes::uint64.priority:
        return b.getInt64Ty();
      case dtypes::float16.priority:
        return b.getHalfTy();
      case dtypes::bfloat16.priority:
        return b.getInt16Ty();  // its bits: converted by integer ops, which every target has
      case dtypes::float32.priority:
        return b.getFloatTy();
      default:
        return b.getDoubleTy();
    }
  }
  // Values compute in: bool as i1, float16 and bfloat16 in float.
  llvm::Type* compute(DType d) {
    if (d == dtypes::bool_) return b.getInt1Ty();
    return d == dtypes::float16 || d == dtypes::bfloat16 ? b.getFloatTy() : storage(d);
  }
  // bfloat16's bits and a float: its upper half, rounded to nearest even (NaN stays a quiet NaN).
  llvm::Value* bf16_to_float(llvm::Value* h) {
    return b.CreateBitCast(b.CreateShl(b.CreateZExt(h, b.getInt32Ty()), 16), b.getFloatTy());
  }
  llvm::Value* float_to_bf16(llvm::Value* f) {
    llvm::Value* x = b.CreateBitCast(f, b.getInt32Ty());
    llvm::Value* odd = b.CreateAnd(b.CreateLShr(x, 16), 1);
    llvm::Value* rounded = b.CreateLShr(b.CreateAdd(b.CreateAdd(x, b.getInt32(0x7fff)), odd), 16);
    llvm::Value* nan = b.CreateICmpUGT(b.CreateAnd(x, 0x7fffffff), b.getInt32(0x7f800000));
    llvm::Value* quiet = b.CreateOr(b.CreateLShr(x, 16), 0x40);
    return b.CreateTrunc(b.CreateSelect(nan, quiet, rounded), b.getInt16Ty());
  }
  static bool is_signed(DType d) { return d.kind == 'i'; }

  llvm::Constant* constant(double v, DType d) {
    if (dtypes::is_float(d))
      return llvm::ConstantFP::get(compute(d), d == dtypes::float16    ? double(float(half(float(v))))
                                               : d == dtypes::bfloat16 ? double(float(bf16(float(v))))
                                                                       : v);
    if (d == dtypes::bool_) return b.getInt1(v != 0 && v > -9.2233720368547758e18);  // MAX's identity: false
    unsigned w = compute(d)->getIntegerBitWidth();
    bool u = dtypes::is_unsigned(d);
    // Beyond int64 saturates to the dtype's limits: a MAX reduce starts from int64's minimum. uint64
    // holds [2^63, 2^64) too.
    if (d == dtypes::uint64 && v >= 9.2233720368547758e18)
      return llvm::ConstantInt::get(
          ctx, v >= 0x1p64 ? llvm::APInt::getMaxValue(64) : llvm::APInt(64, static_cast<std::uint64_t>(v)));
    llvm::APInt x =
        std::isnan(v)                 ? llvm::APInt(w, 0)
        : v <= -9.2233720368547758e18 ? (u ? llvm::APInt::getMinValue(w) : llvm::APInt::getSignedMinValue(w))
        : v >= 9.2233720368547758e18
            ? (u ? llvm::APInt::getMaxValue(w) : llvm::APInt::getSignedMaxValue(w))
            : llvm::APInt(64, static_cast<std::uint64_t>(static_cast<std::int64_t>(v)), true).sextOrTrunc(w);
    return llvm::ConstantInt::get(ctx, x);
  }

  // ---- conversions, as the CPU device does them ----
  llvm::Value* cast(llvm::Value* v, DType from, DType to) {
    if (from == to) return v;
    bool ff = dtypes::is_float(from);
    if (dtypes::is_float(to)) {
      llvm::Type* t = compute(to);
      llvm::Value* x = ff                                                   ? b.CreateFPCast(v, t)
                       : from == dtypes::bool_ || dtypes::is_unsigned(from) ? b.CreateUIToFP(v, t)
                                                                            : b.CreateSIToFP(v, t);
      // float16 computes in float but holds only half's precision after a cast.
      if (to == dtypes::float16) x = b.CreateFPExt(b.CreateFPTrunc(x, b.getHalfTy()), t);
      if (to == dtypes::bfloat16) x = bf16_to_float(float_to_bf16(x));
      return x;
    }
    if (to == dtypes::bool_)  // non-zero is true: 0.5 and NaN too (C, numpy)
      return ff ? b.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0))
                : b.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
    if (ff) {  // NaN gives 0 and out-of-range saturates to the dtype's range, as on every device
      auto id = dtypes::is_unsigned(to) ? llvm::Intrinsic::fptoui_sat : llvm::Intrinsic::fptosi_sat;
      return b.CreateIntrinsic(id, {compute(to), v->getType()}, {v});
    }
    return b.CreateIntCast(v, compute(to), is_signed(from));
  }

  // ---- symbolic index math, in i64 ----
  llvm::Value* index(const Node& n) {
    llvm::Type* i64 = b.getInt64Ty();
    llvm::Value* zero = b.getInt64(0);
    switch (n.kind()) {
      case NodeKind::Num:
        return b.getInt64(n.b());
      case NodeKind::Variable: {
        auto it = vars.find(n.name());
        if (it == vars.end())
          throw std::runtime_error(
              detail::cat("LLVM: kernel ", k.name, " uses ", n.name(), " outside its loop"));
        return it->second;
      }
      case NodeKind::Mul:
        return b.CreateNSWMul(index(n.a()), b.getInt64(n.b()));
      case NodeKind::Div:
      case NodeKind::Mod: {
        // Divisors are positive: a non-negative numerator divides as unsigned, any other floors.
        llvm::Value *a = index(n.a()), *d = b.getInt64(n.b());
        bool div = n.kind() == NodeKind::Div;
        if (n.a().min() >= 0) return div ? b.CreateUDiv(a, d) : b.CreateURem(a, d);
        llvm::Value* neg = b.CreateICmpSLT(b.CreateSRem(a, d), zero);
        if (div) return b.CreateSub(b.CreateSDiv(a, d), b.CreateZExt(neg, i64));
        return b.CreateAdd(b.CreateSRem(a, d), b.CreateSelect(neg, d, zero));
      }
      case NodeKind::Lt:
      case NodeKind::And:
        return b.CreateZExt(truth(n), i64);
      case NodeKind::Sum: {
        llvm::Value* s = index(n.nodes()[0]);
        for (std::size_t i = 1; i < n.nodes().size(); ++i) s = b.CreateNSWAdd(s, index(n.nodes()[i]));
        return s;
      }
    }
    return zero;
  }

  // A node as a condition (i1): validity expressions are ands of comparisons.
  llvm::Value* truth(const Node& n) {
    if (n.kind() == NodeKind::Lt) return b.CreateICmpSLT(index(n.a()), b.getInt64(n.b()));
    if (n.kind() == NodeKind::Num) return b.getInt1(n.b() != 0);
    if (n.kind() != NodeKind::And) return b.CreateICmpNE(index(n), b.getInt64(0));
    llvm::Value* s = truth(n.nodes()[0]);
    for (std::size_t i = 1; i < n.nodes().size(); ++i) s = b.CreateAnd(s, truth(n.nodes()[i]));
    return s;
  }

  // ---- ALU ----
  // The integer power as the CPU device computes it, a square-and-multiply loop in i64. Unsigned
  // (uint64's mg_upow), every exponent counts up: none is negative.
  llvm::Function* ipow_fn(bool is_unsigned) {
    const char* fname = is_unsigned ? "mg_upow" : "mg_ipow";
    if (llvm::Function* f = mod->getFunction(fname)) return f;
    llvm::Type* i64 = b.getInt64Ty();
    auto* f = llvm::Function::Create(llvm::FunctionType::get(i64, {i64, i64}, false),
                                     llvm::Function::InternalLinkage, fname, *mod);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    llvm::IRBuilder<> h(ctx);
    auto* entry = llvm::BasicBlock::Create(ctx, "entry", f);
    auto* neg = llvm::BasicBlock::Create(ctx, "neg", f);
    auto* head = llvm::BasicBlock::Create(ctx, "head", f);
    auto* body = llvm::BasicBlock::Create(ctx, "body", f);
    auto* done = llvm::BasicBlock::Create(ctx, "done", f);
    llvm::Value *base = f->getArg(0), *e = f->getArg(1);
    llvm::Value *c0 = h.getInt64(0), *c1 = h.getInt64(1), *cm1 = h.getInt64(-1);
    h.SetInsertPoint(entry);
    h.CreateCondBr(is_unsigned ? h.getFalse() : h.CreateICmpSLT(e, c0), neg, head);
    h.SetInsertPoint(neg);  // b**-n: only 1 and -1 have an integer result; the rest truncate to 0
    llvm::Value* odd = h.CreateICmpNE(h.CreateAnd(e, c1), c0);
    h.CreateRet(h.CreateSelect(h.CreateICmpEQ(base, c1), c1,
                               h.CreateSelect(h.CreateICmpEQ(base, cm1), h.CreateSelect(odd, cm1, c1), c0)));
    h.SetInsertPoint(head);
    llvm::PHINode *r = h.CreatePHI(i64, 2), *x = h.CreatePHI(i64, 2), *n = h.CreatePHI(i64, 2);
    h.CreateCondBr(h.CreateICmpEQ(n, c0), done, body);
    h.SetInsertPoint(body);
    llvm::Value* r2 = h.CreateSelect(h.CreateICmpNE(h.CreateAnd(n, c1), c0), h.CreateMul(r, x), r);
    llvm::Value *x2 = h.CreateMul(x, x), *n2 = h.CreateLShr(n, c1);
    h.CreateBr(head);
    r->addIncoming(c1, entry), r->addIncoming(r2, body);
    x->addIncoming(base, entry), x->addIncoming(x2, body);
    n->addIncoming(e, entry), n->addIncoming(n2, body);
    h.SetInsertPoint(done);
    h.CreateRet(r);
    return f;
  }

  // C's truncating division; x/0 is 0 and INT_MIN/-1 wraps, with no instruction that can trap.
  llvm::Value* idiv(llvm::Value* a, llvm::Value* d, DType dt) {
    llvm::Type* t = a->getType();
    llvm::Value *zero = llvm::ConstantInt::get(t, 0), *one = llvm::ConstantInt::get(t, 1);
    llvm::Value* by0 = b.CreateICmpEQ(d, zero);
    if (dtypes::is_unsigned(dt))
      return b.CreateSelect(by0, zero, b.CreateUDiv(a, b.CreateSelect(by0, one, d)));
    llvm::Value* by_m1 = b.CreateICmpEQ(d, llvm::ConstantInt::getAllOnesValue(t));
    llvm::Value* q = b.CreateSDiv(a, b.CreateSelect(b.CreateOr(by0, by_m1), one, d));
    return b.CreateSelect(by0, zero, b.CreateSelect(by_m1, b.CreateNeg(a), q));
  }

  // 2^x for float x as the C kernels' mg_exp2f computes it (see cstyle.cpp): straight-line code
  // the loop vectorizer widens, where llvm.exp2 is a scalar library call.
  llvm::Value* exp2f(llvm::Value* x) {
    auto f = [&](double v) { return llvm::ConstantFP::get(b.getFloatTy(), v); };
    llvm::Type* i32 = b.getInt32Ty();
    llvm::Value* c = b.CreateSelect(b.CreateFCmpOGT(x, f(-151)), x, f(-151));  // NaN -> -151
    c = b.CreateSelect(b.CreateFCmpOLT(c, f(129)), c, f(129));
    // Below -150 the result is 0: such lanes work on 0 instead, since a product rounding to a
    // subnormal or 0 costs a microcode assist per vector instruction (a causal mask's -inf).
    llvm::Value* live = b.CreateFCmpOGT(c, f(-150));
    c = b.CreateSelect(live, c, f(0));
    llvm::Value* n = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, c);
    llvm::Value* r = b.CreateFSub(c, n);
    llvm::Value* p = f(1.5252733804059841e-05);
    for (double k : {1.5403530393381610e-04, 1.3333558146428443e-03, 9.6181291076284772e-03,
                     5.5504108664821580e-02, 2.4022650695910071e-01, 6.9314718055994531e-01, 1.0})
      p = b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {b.getFloatTy()},
                            {p, r, f(k)});  // FMA where there is one
    llvm::Value* i = b.CreateFPToSI(n, i32);
    llvm::Value* h = b.CreateAShr(i, b.getInt32(1));
    auto scale = [&](llvm::Value* e) {
      return b.CreateBitCast(b.CreateShl(b.CreateAdd(e, b.getInt32(127)), 23), b.getFloatTy());
    };
    llvm::Value* y = b.CreateFMul(b.CreateFMul(p, scale(h)), scale(b.CreateSub(i, h)));
    return b.CreateSelect(b.CreateFCmpORD(x, x), b.CreateSelect(live, y, f(0)), x);
  }

  // op on values of dtype `in` (already converted); the result has dtype `out`. The op table's row
  // builds it; bool arithmetic happens on 0/1 in int32 and tests the result for non-zero (1+1 is
  // true), except in rows that take bools as they are.
  llvm::Value* alu(Op op, DType in, DType out, const std::vector<llvm::Value*>& v);

  // ---- memory ----
  llvm::Value* address(const UOp& u) {
    return b.CreateInBoundsGEP(storage(u.dtype), bufs.at(static_cast<std::size_t>(u.buf)), index(u.idx));
  }
  llvm::Value* load_unguarded(const UOp& u) {
    llvm::Value* x = b.CreateAlignedLoad(storage(u.dtype), address(u), llvm::Align(u.dtype.itemsize));
    if (u.dtype == dtypes::bool_) return b.CreateICmpNE(x, b.getInt8(0));
    if (u.dtype == dtypes::bfloat16) return bf16_to_float(x);
    return u.dtype == dtypes::float16 ? b.CreateFPExt(x, b.getFloatTy()) : x;
  }
  // Runs `body` only where u.valid holds; returns the block it ended in (for a phi).
  template <class F>
  llvm::BasicBlock* guarded(const UOp& u, llvm::BasicBlock* join, F body) {
    auto* then = llvm::BasicBlock::Create(ctx, "valid", fn);
    b.CreateCondBr(truth(u.valid), then, join);
    b.SetInsertPoint(then);
    body();
    llvm::BasicBlock* end = b.GetInsertBlock();
    b.CreateBr(join);
    join->insertInto(fn);
    b.SetInsertPoint(join);
    return end;
  }
  // Where the index may be invalid the load is a branch, never a read that a select discards.
  llvm::Value* load(const UOp& u) {
    if (u.valid.is_num()) return u.valid.b() ? load_unguarded(u) : constant(0, u.dtype);
    llvm::BasicBlock* from = b.GetInsertBlock();
    auto* join = llvm::BasicBlock::Create(ctx, "join");
    llvm::Value* x = nullptr;
    llvm::BasicBlock* then = guarded(u, join, [&] { x = load_unguarded(u); });
    llvm::PHINode* p = b.CreatePHI(x->getType(), 2);
    p->addIncoming(constant(0, u.dtype), from);
    p->addIncoming(x, then);
    return p;
  }
  void store(const UOp& u, llvm::Value* v) {
    if (u.dtype == dtypes::bool_) v = b.CreateZExt(v, b.getInt8Ty());
    if (u.dtype == dtypes::float16) v = b.CreateFPTrunc(v, b.getHalfTy());
    if (u.dtype == dtypes::bfloat16) v = float_to_bf16(v);
    auto emit = [&] { b.CreateAlignedStore(v, address(u), llvm::Align(u.dtype.itemsize)); };
    if (!u.valid.is_num())
      guarded(u, llvm::BasicBlock::Create(ctx, "join"), emit);
    else if (u.valid.b())
      emit();
  }

  // A uop's value at the current point: an accumulator is read from its slot.
  llvm::Value* value(int i) {
    auto j = static_cast<std::size_t>(i);
    if (j >= vals.size() || !vals[j])
      throw std::runtime_error(
          detail::cat("LLVM: kernel ", k.name, " uses uop ", std::to_string(i), ", which has no value"));
    if (!is_acc[j]) return vals[j];
    return b.CreateLoad(compute(k.uops[j].dtype), vals[j]);
  }
  // Operand n of u converted to dtype `to` (C would convert implicitly).
  llvm::Value* operand(const UOp& u, std::size_t n, DType to) {
    int i = u.vin.at(n);
    return cast(value(i), k.uops.at(static_cast<std::size_t>(i)).dtype, to);
  }

  // ---- the kernel ----
  // Names a uop's value v<i>, as the C renderer does, so DEBUG=4 and DEBUG=5 read together.
  static llvm::Value* name(llvm::Value* v, std::size_t i) {
    if (llvm::isa<llvm::Instruction>(v) && !v->hasName()) v->setName("v" + std::to_string(i));
    return v;
  }
  void loop(const UOp& u) {
    llvm::Value *lo = b.getInt64(0), *hi = b.getInt64(u.extent);
    if (u.threaded) {
      lo = fn->getArg(range_arg);
      hi = fn->getArg(range_arg + 1);
    }
    llvm::BasicBlock* pre = b.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx, u.name + ".head", fn);
    auto* body = llvm::BasicBlock::Create(ctx, u.name + ".body", fn);
    auto* exit = llvm::BasicBlock::Create(ctx, u.name + ".end");
    b.CreateBr(header);
    b.SetInsertPoint(header);
    llvm::PHINode* i = b.CreatePHI(b.getInt64Ty(), 2, u.name);
    i->addIncoming(lo, pre);
    b.CreateCondBr(b.CreateICmpSLT(i, hi), body, exit);
    b.SetInsertPoint(body);
    vars[u.name] = i;
    loops.push_back({i, header, exit});
  }
  void endloop() {
    if (loops.empty())
      throw std::runtime_error(detail::cat("LLVM: kernel ", k.name, " closes a loop it never opened"));
    Loop l = loops.back();
    loops.pop_back();
    l.i->addIncoming(b.CreateAdd(l.i, b.getInt64(1), "", true, true), b.GetInsertBlock());
    b.CreateBr(l.header);
    l.exit->insertInto(fn);
    b.SetInsertPoint(l.exit);
  }

  // `void @name(ptr data0, ..., i64 start, i64 end)` and its entry block.
  // Past kMaxBufferArguments buffers, `void @name(ptr args, i64 start, i64 end)`, each data<i> loaded
  // from args[i].
  void signature() {
    bool array = k.buf_dtypes.size() > kMaxBufferArguments;
    std::vector<llvm::Type*> args(array ? 1 : k.buf_dtypes.size(), llvm::PointerType::get(ctx, 0));
    args.push_back(b.getInt64Ty());
    args.push_back(b.getInt64Ty());
    fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), args, false),
                                llvm::Function::ExternalLinkage, k.name, *mod);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    range_arg = static_cast<unsigned>(args.size()) - 2;
    for (unsigned i = 0; i < range_arg; ++i) {
      llvm::Argument* a = fn->getArg(i);
      a->setName(array ? "args" : "data" + std::to_string(i));
      a->addAttr(llvm::Attribute::NoAlias);  // restrict, as the C kernels declare it
      a->addAttr(llvm::Attribute::NoCapture);
      if (array || !written(k, i)) a->addAttr(llvm::Attribute::ReadOnly);
      if (!array) bufs.push_back(a);
    }
    fn->getArg(range_arg)->setName("start");
    fn->getArg(range_arg + 1)->setName("end");
    b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
    for (unsigned i = 0; i < k.buf_dtypes.size() && array; ++i) {
      llvm::Type* ptr = llvm::PointerType::get(ctx, 0);
      bufs.push_back(
          b.CreateLoad(ptr, b.CreateConstInBoundsGEP1_64(ptr, fn->getArg(0), i), "data" + std::to_string(i)));
    }
  }

  // An accumulator: a stack slot (in the entry block, so mem2reg/SROA make it a register), set here.
  void define_acc(const UOp& u, std::size_t i) {
    llvm::BasicBlock& entry = fn->getEntryBlock();
    llvm::IRBuilder<> eb(&entry, entry.begin());
    vals[i] = eb.CreateAlloca(compute(u.dtype), nullptr, "acc" + std::to_string(i));
    is_acc[i] = true;
    b.CreateStore(u.vin.empty() ? constant(u.value, u.dtype) : operand(u, 0, u.dtype), vals[i]);
  }
  void accumulate(const UOp& u) {  // vin[0] = alu(vin[0], vin[1])
    std::size_t a = static_cast<std::size_t>(u.vin.at(0));
    if (a >= vals.size() || !is_acc[a])
      throw std::runtime_error(detail::cat("LLVM: kernel ", k.name, " accumulates into uop ",
                                           std::to_string(a), ", which is not an accumulator"));
    DType dt = k.uops[a].dtype;
    // A sum along memory may be reassociated: the loop vectorizer then keeps partial sums in vector
    // lanes. Nothing else is relaxed: NaN and inf still behave.
    llvm::IRBuilderBase::FastMathFlagGuard guard(b);
    if (k.reassociate && u.alu == BinaryOps::ADD && dtypes::is_float(dt)) {
      llvm::FastMathFlags fmf;
      fmf.setAllowReassoc();
      b.setFastMathFlags(fmf);
    }
    b.CreateStore(alu(u.alu, dt, dt, {value(u.vin[0]), operand(u, 1, dt)}), vals[a]);
  }

  void emit(std::size_t i) {
    const UOp& u = k.uops[i];
    switch (u.uop) {
      case UOps::LOOP:
        loop(u);
        break;
      case UOps::ENDLOOP:
        endloop();
        break;
      case UOps::CONST:
        vals[i] = constant(u.value, u.dtype);
        break;
      case UOps::DEFINE_ACC:
        define_acc(u, i);
        break;
      case UOps::LOAD:
        vals[i] = name(load(u), i);
        break;
      case UOps::ALU: {
        DType in = alu_input_dtype(u, k.uops);
        bool where = u.alu == TernaryOps::WHERE;  // its condition is read as a bool
        std::vector<llvm::Value*> v;
        for (std::size_t n = 0; n < u.vin.size(); ++n)
          v.push_back(operand(u, n, where && !n ? dtypes::bool_ : in));
        vals[i] = name(alu(u.alu, in, u.dtype, v), i);
        break;
      }
      case UOps::ACC:
        accumulate(u);
        break;
      case UOps::STORE:
        store(u, operand(u, 0, u.dtype));
        break;
      case UOps::LOCAL:
      case UOps::GROUP:
        throw std::runtime_error(detail::cat("LLVM: kernel ", k.name, " uses OpenCL work-groups"));
    }
  }

  std::unique_ptr<llvm::Module> render() {
    signature();
    vals.assign(k.uops.size(), nullptr);
    is_acc.assign(k.uops.size(), false);
    for (std::size_t i = 0; i < k.uops.size(); ++i) emit(i);
    if (!loops.empty()) throw std::runtime_error(detail::cat("LLVM: kernel ", k.name, " leaves a loop open"));
    b.CreateRetVoid();
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyFunction(*fn, &os) || llvm::verifyModule(*mod, &os))
      throw std::runtime_error(detail::cat("LLVM: the IR of kernel ", k.name, " does not verify:\n", os.str(),
                                           "--- IR ---\n", print(*mod)));
    return std::move(mod);
  }
};

// ---- the op table: a builder per op, on operands already converted to the dtype `in` ----

using Operands = std::vector<llvm::Value*>;
struct LlvmRow {
  llvm::Value* (*build)(Renderer& r, DType in, DType out, const Operands& v);
  bool bools_as_int = true;  // bool operands compute as int32 0/1 (ADD: true + true is true)
};

bool fl(DType d) { return dtypes::is_float(d); }
// EXP2, LOG2 and SIN: intrinsics on floats (float32's 2^x as the C kernels' mg_exp2f computes it);
// on integers the identity, as on the CPU device.
llvm::Value* unary_math(Renderer& r, DType in, DType out, const Operands& v, llvm::Intrinsic::ID id) {
  if (!fl(in)) return r.cast(v[0], in, out);
  if (id == llvm::Intrinsic::exp2 && in != dtypes::float64) return r.cast(r.exp2f(v[0]), in, out);
  return r.cast(r.b.CreateUnaryIntrinsic(id, v[0]), in, out);
}
// The integer power as the CPU device computes it, in i64.
llvm::Value* ipow(Renderer& r, DType in, const Operands& v) {
  llvm::Type* i64 = r.b.getInt64Ty();
  bool s = Renderer::is_signed(in);
  llvm::Value* p = r.b.CreateCall(r.ipow_fn(in == dtypes::uint64),
                                  {r.b.CreateIntCast(v[0], i64, s), r.b.CreateIntCast(v[1], i64, s)});
  return r.b.CreateTrunc(p, v[0]->getType());
}
// mg_max: (x > y || x != x) ? x : y, so a NaN on either side wins.
llvm::Value* max(Renderer& r, DType in, const Operands& v) {
  llvm::IRBuilder<>& b = r.b;
  if (fl(in))
    return b.CreateSelect(b.CreateOr(b.CreateFCmpOGT(v[0], v[1]), b.CreateFCmpUNO(v[0], v[0])), v[0], v[1]);
  return b.CreateBinaryIntrinsic(Renderer::is_signed(in) ? llvm::Intrinsic::smax : llvm::Intrinsic::umax,
                                 v[0], v[1]);
}

const std::vector<std::pair<Op, LlvmRow>>& llvm_code_for_op() {
  using R = Renderer;
  static const std::vector<std::pair<Op, LlvmRow>> t = {
      {UnaryOps::NOOP,
       {[](R& r, DType in, DType out, const Operands& v) { return r.cast(v[0], in, out); }, false}},
      {UnaryOps::CAST,
       {[](R& r, DType in, DType out, const Operands& v) { return r.cast(v[0], in, out); }, false}},
      {UnaryOps::EXP2,
       {[](R& r, DType in, DType out, const Operands& v) {
          return unary_math(r, in, out, v, llvm::Intrinsic::exp2);
        },
        false}},
      {UnaryOps::LOG2,
       {[](R& r, DType in, DType out, const Operands& v) {
          return unary_math(r, in, out, v, llvm::Intrinsic::log2);
        },
        false}},
      {UnaryOps::SIN,
       {[](R& r, DType in, DType out, const Operands& v) {
          return unary_math(r, in, out, v, llvm::Intrinsic::sin);
        },
        false}},
      {BinaryOps::ADD, {[](R& r, DType in, DType out, const Operands& v) {
         return r.cast(fl(in) ? r.b.CreateFAdd(v[0], v[1]) : r.b.CreateAdd(v[0], v[1]), in, out);
       }}},
      {BinaryOps::SUB, {[](R& r, DType in, DType out, const Operands& v) {
         return r.cast(fl(in) ? r.b.CreateFSub(v[0], v[1]) : r.b.CreateSub(v[0], v[1]), in, out);
       }}},
      {BinaryOps::MUL, {[](R& r, DType in, DType out, const Operands& v) {
         return r.cast(fl(in) ? r.b.CreateFMul(v[0], v[1]) : r.b.CreateMul(v[0], v[1]), in, out);
       }}},
      {BinaryOps::DIV, {[](R& r, DType in, DType out, const Operands& v) {
         return r.cast(fl(in) ? r.b.CreateFDiv(v[0], v[1]) : r.idiv(v[0], v[1], in), in, out);
       }}},
      {BinaryOps::POW, {[](R& r, DType in, DType out, const Operands& v) {
         return r.cast(fl(in) ? r.b.CreateBinaryIntrinsic(llvm::Intrinsic::pow, v[0], v[1]) : ipow(r, in, v),
                       in, out);
       }}},
      {BinaryOps::CMPEQ,
       {[](R& r, DType in, DType out, const Operands& v) {
          return r.cast(fl(in) ? r.b.CreateFCmpOEQ(v[0], v[1]) : r.b.CreateICmpEQ(v[0], v[1]), dtypes::bool_,
                        out);
        },
        false}},
      {BinaryOps::MAX,
       {[](R& r, DType in, DType out, const Operands& v) { return r.cast(max(r, in, v), in, out); }, false}},
      {TernaryOps::WHERE,
       {[](R& r, DType in, DType out, const Operands& v) {
          return r.cast(r.b.CreateSelect(v[0], v[1], v[2]), in, out);
        },
        false}},
  };
  return t;
}

llvm::Value* Renderer::alu(Op op, DType in, DType out, const Operands& v) {
  for (const auto& [o, row] : llvm_code_for_op()) {
    if (o != op) continue;
    if (in != dtypes::bool_ || !row.bools_as_int) return row.build(*this, in, out, v);
    Operands w;
    for (llvm::Value* x : v) w.push_back(cast(x, dtypes::bool_, dtypes::int32));
    return cast(row.build(*this, dtypes::int32, dtypes::int32, w), dtypes::int32, out);
  }
  throw std::runtime_error("LLVM: no rendering for " + to_string(op));
}

}  // namespace

std::unique_ptr<llvm::Module> render_llvm_module(const LinearizedKernel& k, llvm::LLVMContext& ctx) {
  return Renderer(k, ctx).render();
}

std::string render_llvm(const LinearizedKernel& k) {
  llvm::LLVMContext ctx;
  return print(*render_llvm_module(k, ctx));
}

void optimize_llvm_module(llvm::Module& m, llvm::TargetMachine& tm) {
  m.setTargetTriple(tm.getTargetTriple().str());
  m.setDataLayout(tm.createDataLayout());
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", tm.getTargetCPU());
    f.addFnAttr("target-features", tm.getTargetFeatureString());
  }
  // Declared in this order so they are destroyed in the right one (they refer to each other).
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  llvm::PassBuilder pb(&tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(m, mam);
}

}  // namespace metagrad::codegen
